"""The demo's imported sessions (manifests/demo/imported.py): transcripts the real agent CLIs wrote
to disk, read by ``ctxkit import``'s readers and stored with their times moved to the present."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model

from ctxkit.importer.sessions import NOT_ITEMISED
from manifests import services
from manifests.demo import imported
from manifests.models import Call, Project, Run

pytestmark = pytest.mark.django_db

CLOCK = datetime(2026, 12, 1, 9, 14, 37, tzinfo=UTC)
SOURCES = {"claude-code", "codex", "gemini"}


def _project() -> Project:
    owner = get_user_model().objects.create_user("owner-imported", password="pw-for-tests-only")
    return services.create_project(name="Imported", owner=owner)


def test_it_holds_a_transcript_of_each_cli_and_no_key():
    assert {p.name for p in imported.TRANSCRIPTS.iterdir() if p.is_dir()} == SOURCES
    for path in imported.TRANSCRIPTS.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"sk-ant-" not in data and b"DUMMYKEY" not in data, path


def test_it_reads_each_session_as_its_cli_sent_it():
    sessions = imported.imported()
    assert set(sessions) == SOURCES
    claude_code = sessions["claude-code"]
    # A Read, /compact (its summary request is not in the transcript: the call after it is step 3,
    # as live), the Read again, and a sub-agent: its own transcript, the child run of step 5.
    main_run = [m for m in claude_code if not m.get("parent_run_id")]
    assert [m["step"] for m in main_run] == [0, 1, 3, 4, 5, 6]
    [compaction] = main_run[2]["compactions"]
    assert (compaction["trigger"], compaction["tokens_before"] > 0) == ("manual", True)
    assert len({m["run_id"] for m in main_run}) == 1
    [child] = [m for m in claude_code if m.get("parent_run_id")]
    assert (child["parent_run_id"], child["parent_call_id"]) == (main_run[0]["run_id"], main_run[4]["call_id"])
    assert all(m["builder"]["name"] == "ctxkit.import" for m in claude_code)
    # Claude Code's transcripts hold the request itself: system prompt and tools are itemised.
    assert all(not m.get("warnings") for m in claude_code)
    assert all({"system", "tools"} <= {i["kind"] for i in m["items"]} for m in claude_code)
    # Codex's rollout holds no tool definitions: not itemised; it compacted once, by itself.
    codex = sessions["codex"]
    assert [m["step"] for m in codex] == list(range(7)) and len({m["run_id"] for m in codex}) == 1
    assert all(NOT_ITEMISED in m["warnings"] and "system" in {i["kind"] for i in m["items"]} for m in codex)
    assert [len(m.get("compactions") or []) for m in codex] == [0, 0, 0, 0, 1, 0, 0]
    # Gemini CLI's chat holds neither system instruction nor tools; it compressed once, by itself.
    gemini = sessions["gemini"]
    assert [m["step"] for m in gemini] == list(range(6)) and len({m["run_id"] for m in gemini}) == 1
    assert all(NOT_ITEMISED in m["warnings"] and not {"system", "tools"} & {i["kind"] for i in m["items"]}
               for m in gemini)
    assert [len(m.get("compactions") or []) for m in gemini] == [0, 0, 0, 1, 0, 0]


def test_it_stores_the_sessions_once_ending_now():
    project = _project()
    first = imported.load_imported_sessions(project=project, now=CLOCK)
    calls = Call.objects.filter(project=project)
    assert first == {"accepted": calls.count(), "duplicates": 0} and first["accepted"] > 0
    assert max(c.ended_at or c.started_at for c in calls) == CLOCK
    assert Run.objects.filter(project=project).count() == len(SOURCES) + 1  # and Claude Code's sub-agent
    again = imported.load_imported_sessions(project=project, now=CLOCK)
    assert again == {"accepted": 0, "duplicates": first["accepted"]}
    assert Call.objects.filter(project=project).count() == first["accepted"]
