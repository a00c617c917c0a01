"""``ctxkit import --codex``: a Codex CLI rollout on disk sent as manifests (against a real local server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import API_KEY, IngestServer
from ctxkit.agents.codex import COMPACTION_PROMPT, SUMMARY_PREFIX, RolloutReader, transcript_calls, transcript_files
from ctxkit.cli import main
from ctxkit.importer.sessions import NOT_ITEMISED

SESSION = "01a24bf4-5b08-75c1-b1ff-2c7d05c7b491"
BASE = "You are a coding agent running in the Codex CLI."
READ = {"cmd": "cat /src/app/note.txt"}


def _line(kind: str, payload: dict, **extra: object) -> str:
    return json.dumps({"timestamp": "2026-12-01T10:00:00.000Z", "type": kind, "payload": payload, **extra})


def _message(role: str, text: str, item_id: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "id": item_id, "role": role, "content": [{"type": kind, "text": text}]}


def _item(item: dict, **extra: object) -> str:
    return _line("response_item", {**item, "internal_chat_message_metadata_passthrough": {"turn_id": "t"}}, **extra)


def _usage(response_id: str, input_tokens: int) -> str:
    return _line("token_usage_record", {"session_id": SESSION, "response_id": response_id, "usage": {
        "input_tokens": input_tokens, "cached_input_tokens": input_tokens // 2, "cache_write_input_tokens": 0,
        "output_tokens": 9, "reasoning_output_tokens": 3, "total_tokens": input_tokens + 9}})


def _call(number: int) -> dict:
    return {"type": "function_call", "id": f"fc_{number}", "name": "exec_command", "arguments": json.dumps(READ),
            "call_id": f"call_{number}"}


DEVELOPER = _message("developer", "<permissions instructions>read-only</permissions instructions>", "msg_dev")
CONTEXT = _message("user", "<environment_context><cwd>/src/app</cwd></environment_context>", "msg_env")
PROMPT = _message("user", "read /src/app/note.txt", "msg_prompt")
SUMMARY = _message("user", f"{SUMMARY_PREFIX} Here is the summary:\nThe note was read.", "msg_summary")
AGAIN = _message("user", "read /src/app/note.txt again", "msg_again")


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    """One rollout: a function call reading a note, its answer, Codex's compaction (its request's
    answer, the compacted line), the note read again after it; a line that is not JSON and a last
    line cut before its newline."""
    folder = tmp_path / "sessions" / "2026" / "12" / "01"
    folder.mkdir(parents=True)
    lines = [
        _line("session_meta", {"id": SESSION, "cwd": "/src/app", "originator": "codex_exec", "cli_version": "0.171.0",
                               "base_instructions": {"text": BASE}, "git": {"branch": "feature/refunds"}}),
        _item(DEVELOPER), _item(CONTEXT),
        _line("turn_context", {"model": "gpt-5-codex", "cwd": "/src/app"}),
        _item(PROMPT), _item(_call(1)), _usage("resp_1", 1000),
        _item({"type": "function_call_output", "call_id": "call_1", "output": "The refund rate is 0.0321."}),
        "{this is not json",
        _item(_message("assistant", "The note says: The refund rate is 0.0321.", "msg_a1")), _usage("resp_2", 1100),
        _item(_message("assistant", "The note was read.", "msg_c"), metadata={"compaction_output": True}),
        _usage("resp_3", 1150),
        _line("compacted", {"message": f"{SUMMARY_PREFIX} Here is the summary:\nThe note was read.",
                            "replacement_history": [DEVELOPER, CONTEXT, PROMPT, SUMMARY]}),
        _line("turn_context", {"model": "gpt-5-codex", "cwd": "/src/app"}),
        _item(AGAIN), _item(_call(5)), _usage("resp_4", 600),
        _item({"type": "function_call_output", "call_id": "call_5", "output": "The refund rate is 0.0321."}),
        _item(_message("assistant", "The note says: The refund rate is 0.0321.", "msg_a2")), _usage("resp_5", 700),
    ]
    path = folder / f"rollout-2026-12-01T10-00-00-{SESSION}.jsonl"
    path.write_text("\n".join(lines) + '\n{"timestamp": "2026-12-01T10:00:09.000Z", "type": "respo', encoding="utf-8")
    return tmp_path / "sessions"


def test_it_reads_a_growing_rollout_once_line_by_line_as_a_whole_read_of_it(sessions: Path, tmp_path: Path) -> None:
    [path] = transcript_files(str(sessions))
    whole = [(call.key, call.request, end) for call, end in transcript_calls(path)]
    growing = tmp_path / "growing.jsonl"
    growing.write_bytes(b"")
    reader = RolloutReader(str(growing))
    seen = []
    for line in Path(path).read_bytes().splitlines(keepends=True):
        with open(growing, "ab") as handle:
            handle.write(line)
        seen += [(call.key, call.request, end) for call, end in reader.read()]
    assert seen == whole
    assert reader.offset == len(Path(path).read_bytes()) - len(line)  # all but the last line, cut short
    assert list(reader.read()) == []


def _import(sessions: Path, server: IngestServer) -> int:
    return main(["import", "--codex", str(sessions), "--host", server.url, "--api-key", API_KEY])


def test_it_rebuilds_each_codex_response_as_the_request_codex_sent(sessions: Path) -> None:
    [path] = transcript_files(str(sessions))
    malformed: list[str] = []
    calls = [call for call, _end in transcript_calls(path, 0, malformed)]
    assert malformed == [f"{path}:9: not JSON", f"{path}:22: truncated line"]
    assert [c.key for c in calls] == ["resp_1", "resp_2", "resp_3", "resp_4", "resp_5"]
    assert all(not c.exact and c.session == SESSION for c in calls)
    assert (calls[0].cwd, calls[0].git_branch, calls[0].headers) == (
        "/src/app", "feature/refunds", {"user-agent": "codex_exec/0.171.0", "session-id": SESSION})
    base = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": BASE}]}
    first, answered, compaction, after, last = (c.request for c in calls)
    assert first == {"model": "gpt-5-codex", "stream": True, "input": [base, DEVELOPER, CONTEXT, PROMPT]}
    assert answered["input"][4:] == [_call(1), {"type": "function_call_output", "call_id": "call_1",
                                                "output": "The refund rate is 0.0321."}]
    # Codex's compaction request: the whole history, its prompt, no tools; its answer is not history.
    assert compaction["tools"] == [] and compaction["input"][-1]["content"][0]["text"] == COMPACTION_PROMPT
    assert compaction["input"][1:-1] == answered["input"][1:] + [calls[1].response["output"][0]]
    assert after["input"] == [base, DEVELOPER, CONTEXT, PROMPT, SUMMARY, AGAIN]
    assert last["input"][-2:] == [_call(5), {"type": "function_call_output", "call_id": "call_5",
                                             "output": "The refund rate is 0.0321."}]
    assert calls[0].response["output"] == [_call(1)]
    assert calls[0].response["usage"] == {"input_tokens": 1000, "input_tokens_details": {"cached_tokens": 500},
                                          "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 3},
                                          "total_tokens": 1009}


def test_it_imports_a_codex_rollout_once_with_its_compaction(sessions: Path, server: IngestServer, tmp_path: Path,
                                                             monkeypatch, capsys) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert _import(sessions, server) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "sessions=1 calls=5 skipped=0 malformed=2 rejected=0 spooled=0"
    assert ".jsonl:9: not JSON" in err and ".jsonl:22: truncated line" in err
    stored = sorted(server.stored.values(), key=lambda m: m["step"])
    assert [m["step"] for m in stored] == [0, 1, 2, 3, 4]
    assert {m["run_id"] for m in stored} == {f"session-{SESSION}"}
    assert {(m["agent"], m["model"]) for m in stored} == {("codex_exec", "gpt-5-codex")}
    assert all(NOT_ITEMISED in m["warnings"] for m in stored)
    assert [m["usage"]["input_tokens"] for m in stored] == [1000, 1100, 1150, 600, 700]
    assert [i["text"] for i in stored[0]["items"] if i["kind"] == "system"] == [BASE, DEVELOPER["content"][0]["text"]]
    # The call after Codex's compaction holds its summary, after the prompt it kept: a compaction.
    [compaction] = stored[3]["compactions"]
    assert (compaction["strategy"], compaction["tokens_before"], compaction["tokens_after"]) == (
        "client_summary", 1150, 600)
    assert compaction["kept_turns"] == 1  # the prompt kept before the summary (not Codex's context)
    summary = next(i for i in stored[3]["items"] if i["id"] == compaction["summary_item"])
    assert summary["kind"] == "summary" and summary["text"].startswith(SUMMARY_PREFIX)
    assert not any(m.get("compactions") for m in stored if m is not stored[3])

    requests = len(server.requests)
    assert _import(sessions, server) == 0
    assert capsys.readouterr().out.strip().startswith("sessions=0 calls=0 ")
    assert len(server.requests) == requests
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh-state"))  # rebuilt and sent again: duplicates
    assert _import(sessions, server) == 0
    capsys.readouterr()
    assert len(server.stored) == 5 and server.duplicates == 5


def test_it_takes_the_rollouts_of_one_project_dir(sessions: Path, tmp_path: Path) -> None:
    other = sessions / "2026" / "12" / "02"
    other.mkdir(parents=True)
    (other / "rollout-2026-12-02T09-00-00-other.jsonl").write_text(
        _line("session_meta", {"id": "other", "cwd": "/src/elsewhere"}) + "\n", encoding="utf-8")
    assert len(transcript_files(str(sessions))) == 2
    [mine] = transcript_files(str(sessions), "/src/app")
    assert mine.endswith(f"{SESSION}.jsonl")


def test_it_leaves_out_a_response_that_ended_without_its_usage(tmp_path: Path) -> None:
    """An interrupted response (its output written, no token_usage_record): the next response's
    request is the history when it began, the interrupted output included."""
    path = tmp_path / f"rollout-2026-12-01T10-00-00-{SESSION}.jsonl"
    aborted = _message("assistant", "Reading the", "msg_cut")
    lines = [_line("session_meta", {"id": SESSION, "cwd": "/src/app", "base_instructions": {"text": BASE}}),
             _line("turn_context", {"model": "gpt-5-codex"}), _item(PROMPT), _item(aborted), _item(AGAIN),
             _item(_call(2)), _usage("resp_2", 300)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    [(call, end)] = list(transcript_calls(str(path)))
    assert (call.key, end) == ("resp_2", path.stat().st_size)
    assert [i.get("id") for i in call.request["input"][1:]] == ["msg_prompt", "msg_cut", "msg_again"]
    assert call.response["output"] == [_call(2)]


def test_it_reads_the_usage_of_earlier_rollouts_from_their_token_count_events(tmp_path: Path) -> None:
    """Rollouts of earlier versions end each response with a token_count event (no record, no id)."""
    path = tmp_path / f"rollout-2026-10-01T10-00-00-{SESSION}.jsonl"
    count = {"type": "token_count", "info": {"last_token_usage": {"input_tokens": 800, "cached_input_tokens": 0,
                                                                  "output_tokens": 5, "total_tokens": 805}}}
    lines = [_line("session_meta", {"id": SESSION, "cwd": "/src/app", "cli_version": "0.46.0"}),
             _line("turn_context", {"model": "gpt-5-codex"}), _item(PROMPT), _item(_call(1)),
             _line("event_msg", count), _line("event_msg", count)]  # a second one, no response pending
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    [(call, _end)] = list(transcript_calls(str(path)))
    assert (call.key, call.response["id"], call.response["usage"]["input_tokens"]) == ("line-5", "", 800)
    assert call.request["input"] == [PROMPT] and call.response["output"] == [_call(1)]
