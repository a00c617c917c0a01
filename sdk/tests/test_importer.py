"""``ctxkit import``: Claude Code transcripts on disk sent as manifests (against a real local server)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import API_KEY, IngestServer
from ctxkit.agents import claude_code
from ctxkit.agents.claude_code import transcript_calls
from ctxkit.cli import main
from ctxkit.importer.sessions import NOT_ITEMISED, SOURCES, import_transcripts

SESSION = "5b0f6a43-7a55-4d0e-9a3c-1f0c2b9d8e01"
SYSTEM = [{"type": "text", "text": "You are a careful coding agent."}]
TOOLS = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {}}}]


def _hash(message: dict) -> str:
    return hashlib.sha256(json.dumps(message, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _line(kind: str, **fields: object) -> str:
    return json.dumps({"type": kind, "sessionId": SESSION, "version": "2.1.332", "cwd": "/src/app",
                       "gitBranch": "main", "timestamp": "2026-12-01T10:00:00.000Z", **fields})


def _answer(message_id: str, text: str, input_tokens: int) -> dict:
    return {"id": message_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
            "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 7}}


@pytest.fixture
def projects(tmp_path: Path) -> Path:
    """One project with a 2.1.332 session (requests written) and an older one (messages only),
    holding a line that is not JSON and a last line cut before its newline."""
    folder = tmp_path / "projects" / "-src-app"
    folder.mkdir(parents=True)
    first = {"role": "user", "content": "list the files"}
    blob = {"role": "user", "content": [{"type": "text", "text": "<system-reminder>today</system-reminder>"}]}
    exact = [
        _line("user", message=first, isSidechain=False, uuid="u1"),
        _line("api-request-shape", shapeHash="s1", shape={"system": SYSTEM, "tools": TOOLS}),
        _line("api-request-blob", hash=_hash(blob), message=blob),
        _line("api-request", id="r1", shapeHash="s1", params={"model": "claude-sonnet-4-5", "max_tokens": 1000,
                                                              "betas": ["claude-code-20250219"]},
              tail=[_hash(first), _hash(blob)], cacheControl=[{"path": ["system", 0], "value": {"type": "ephemeral"}}]),
        _line("assistant", message=_answer("msg_exact_1", "Here they are.", 40), isSidechain=False, uuid="a1"),
    ]
    (folder / f"{SESSION}.jsonl").write_text("\n".join(exact) + "\n", encoding="utf-8")
    older = [
        json.dumps({"type": "user", "sessionId": "old-session", "message": {"role": "user", "content": "hi"}}),
        "{this is not json",
        json.dumps({"type": "assistant", "sessionId": "old-session", "message": _answer("msg_old_1", "Hello.", 12)}),
        json.dumps({"type": "user", "sessionId": "old-session", "message": {"role": "user", "content": "bye"}}),
        json.dumps({"type": "assistant", "sessionId": "old-session", "message": _answer("msg_old_2", "Bye.", 20)}),
    ]
    (folder / "old-session.jsonl").write_text("\n".join(older) + '\n{"type": "user", "sessi', encoding="utf-8")
    return tmp_path / "projects"


def _import(projects: Path, server: IngestServer) -> int:
    return main(["import", "--claude-code", str(projects), "--host", server.url, "--api-key", API_KEY])


def test_it_rebuilds_the_exact_request_from_a_new_transcript(projects: Path) -> None:
    calls = [call for call, _end in transcript_calls(str(projects / "-src-app" / f"{SESSION}.jsonl"))]
    assert len(calls) == 1
    request = calls[0].request
    assert calls[0].exact
    assert request["system"] == [{**SYSTEM[0], "cache_control": {"type": "ephemeral"}}]
    assert request["tools"] == TOOLS
    assert "betas" not in request
    assert [m["content"] for m in request["messages"]] == [
        "list the files", "<system-reminder>today</system-reminder>"]  # a lone text block is sent as a string
    assert calls[0].response["usage"]["input_tokens"] == 40


def test_it_imports_each_call_once_and_reports_malformed_lines(projects: Path, server: IngestServer, tmp_path: Path,
                                                                monkeypatch, capsys) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert _import(projects, server) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "sessions=2 calls=3 skipped=0 malformed=2 rejected=0 spooled=0"
    assert "old-session.jsonl:2: not JSON" in err
    assert "old-session.jsonl:6: truncated line" in err
    stored = list(server.stored.values())
    assert len(stored) == 3
    exact = next(m for m in stored if m["usage"]["input_tokens"] == 40)
    kinds = [item["kind"] for item in exact["items"]]
    assert "system" in kinds and "tools" in kinds
    assert exact["builder"]["name"] == "ctxkit.import"
    assert NOT_ITEMISED not in exact.get("warnings", [])
    older = [m for m in stored if m is not exact]
    assert all(NOT_ITEMISED in m["warnings"] for m in older)
    assert {m["run_id"] for m in older} == {next(iter(older))["run_id"]}
    assert sorted(m["step"] for m in older) == [0, 1]

    requests = len(server.requests)
    assert _import(projects, server) == 0
    assert capsys.readouterr().out.strip().startswith("sessions=0 calls=0 skipped=1 malformed=1")
    assert len(server.requests) == requests
    assert len(server.stored) == 3


def test_it_sends_nothing_new_for_the_same_calls_without_its_state(projects: Path, server: IngestServer,
                                                                   tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-1"))
    assert _import(projects, server) == 0
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-2"))  # a fresh state: every call sent again
    assert _import(projects, server) == 0
    capsys.readouterr()
    assert len(server.stored) == 3
    assert server.duplicates == 3


def test_it_gives_the_call_after_a_compact_boundary_its_trigger_tokens_and_the_summary_request_s_step(
        tmp_path: Path) -> None:
    class Kept:
        def __init__(self) -> None:
            self.manifests: list = []

        def capture(self, manifest: object) -> None:
            self.manifests.append(manifest)

    folder = tmp_path / "projects" / "-src-app"
    (folder / SESSION / "subagents").mkdir(parents=True)
    summary = (f"{claude_code.OPENING} that ran out of context. "
               "The summary below covers the earlier portion of the conversation.\n\nSummary: a note was read.")
    lines = [
        _line("user", message={"role": "user", "content": "read the note"}),
        _line("assistant", message=_answer("msg_c1", "The note says 0.0321.", 900)),
        _line("user", message={"role": "user", "content": "thanks"}),
        _line("assistant", message=_answer("msg_c2", "You are welcome.", 950)),
        _line("system", subtype="compact_boundary", content="Conversation compacted",
              compactMetadata={"trigger": "manual", "preTokens": 10507, "postTokens": 934}),
        _line("user", message={"role": "user", "content": summary}, isCompactSummary=True),
        _line("user", message={"role": "user", "content": "what was the rate?"}),
        _line("assistant", message=_answer("msg_c3", "I do not know.", 300)),
    ]
    session = folder / f"{SESSION}.jsonl"
    session.write_text("\n".join(lines) + "\n", encoding="utf-8")
    agent = folder / SESSION / "subagents" / "agent-a1.jsonl"
    agent.write_text(_line("user", message={"role": "user", "content": "sub"}, isSidechain=True) + "\n"
                     + _line("assistant", message=_answer("msg_s1", "Done.", 50), isSidechain=True) + "\n")
    os.utime(session, (2_000_000_000, 2_000_000_000))  # written after its sub-agent's file, as live
    assert SOURCES["claude-code"].files(str(tmp_path / "projects"), "") == [str(session), str(agent)]
    calls = [call for call, _end in transcript_calls(str(session))]
    assert [c.compacted for c in calls] == [None, None, ("manual", 10507)]
    assert calls[2].request["messages"] == [{"role": "user", "content": summary},
                                            {"role": "user", "content": "what was the rate?"}]
    kept = Kept()
    import_transcripts(SOURCES["claude-code"], str(tmp_path / "projects"), kept)
    main_run = [m for m in kept.manifests if m.call_id.startswith("msg_c")]
    assert [(m.call_id, m.step) for m in main_run] == [("msg_c1", 0), ("msg_c2", 1), ("msg_c3", 3)]
    [compaction] = main_run[2].compactions
    assert (compaction.trigger, compaction.tokens_before, compaction.tokens_after) == ("manual", 10507, 300)
    assert compaction.summary_item == next(i.id for i in main_run[2].items if i.kind == "summary")


def test_it_goes_on_with_the_other_files_when_one_cannot_be_read(projects: Path, server: IngestServer,
                                                                   tmp_path: Path, monkeypatch, capsys) -> None:
    broken = {"id": "msg_broken", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
              "content": 5, "stop_reason": "end_turn"}  # a content no reader expects
    (projects / "-src-app" / "broken.jsonl").write_text(_line("assistant", message=broken) + "\n", encoding="utf-8")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert _import(projects, server) == 0
    out, err = capsys.readouterr()
    assert out.startswith("sessions=2 calls=3 ")
    assert "broken.jsonl: not read further (TypeError: " in err
    assert len(server.stored) == 3
