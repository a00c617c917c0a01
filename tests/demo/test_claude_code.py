"""The demo's recorded Claude Code session (manifests/demo/claude_code.py): the manifests
``ctxkit proxy`` produced for the real CLI over five turns and a ``/compact``, stored through
the ingest service with their times moved to the present."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model

from ctxkit.manifest import decode_manifest
from manifests import services
from manifests.demo import claude_code
from manifests.models import Attribution, CacheEvent, Call, Compaction, Evidence, Item, Project

pytestmark = pytest.mark.django_db

CLOCK = datetime(2026, 12, 1, 9, 14, 37, tzinfo=UTC)


def _project() -> Project:
    owner = get_user_model().objects.create_user("owner-cc", password="pw-for-tests-only")
    return services.create_project(name="Claude Code", owner=owner)


def test_the_fixture_is_small_valid_and_holds_no_key():
    data = claude_code.FIXTURE.read_bytes()
    assert len(data) < 300_000
    assert b"sk-ant-" not in data and b"CLAUDECODEDUMMYKEY" not in data
    manifests = [decode_manifest(line) for line in data.splitlines() if line.strip()]
    assert [m.step for m in manifests] == list(range(6))
    assert {m.run_id for m in manifests} == {claude_code.run_id()}
    assert {m.builder.name for m in manifests if m.builder} == {"ctxkit.proxy"}


def test_it_loads_the_session_as_one_run_ending_now_with_its_compaction():
    project = _project()
    assert claude_code.load_claude_code_session(project=project, now=CLOCK) == {"accepted": 6, "duplicates": 0}
    calls = list(Call.objects.filter(project=project, run__run_id=claude_code.run_id()).order_by("step"))
    assert [c.step for c in calls] == list(range(6))
    assert max(c.ended_at or c.started_at for c in calls) == CLOCK
    assert CLOCK - calls[0].started_at < timedelta(minutes=5)
    assert Item.objects.filter(call=calls[1], kind="tool_result", text__contains="The refund rate is 0.0321.").exists()

    compaction = Compaction.objects.get(project=project)
    assert compaction.call_id == calls[5].pk
    assert (compaction.strategy, compaction.trigger, compaction.failed_invariants) == ("client_summary", "manual", 1)
    assert compaction.tokens_after < compaction.tokens_before
    summary = Item.objects.get(call=calls[5], item_id=compaction.summary_item)
    assert summary.kind == "summary" and "0.0321" not in summary.text
    # The watched fact the loader adds: read at step 1, lost by the compaction's summary.
    [invariant] = compaction.invariants.all()
    assert (invariant.name, invariant.ok, invariant.lost) == ("required_evidence", False, ["refund rate"])
    [lost] = Attribution.objects.filter(call=calls[5], evidence_key="fact:refund rate")
    assert (lost.cause, lost.is_risk) == ("compaction", False)
    assert not Evidence.objects.filter(call=calls[0], key="fact:refund rate").exists()  # not read yet
    assert Evidence.objects.get(call=calls[4], key="fact:refund rate").present
    # The third turn appended a line to the system prompt: its call's cache cause says where.
    assert CacheEvent.objects.get(call=calls[3]).changed_segment == "system"


def test_it_loads_the_session_once():
    project = _project()
    claude_code.load_claude_code_session(project=project, now=CLOCK, analyse=False)
    assert claude_code.load_claude_code_session(project=project, now=CLOCK) == {"accepted": 0, "duplicates": 6}
    assert Call.objects.filter(project=project).count() == 6
