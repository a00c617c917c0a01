"""``ctxkit import --gemini``: Gemini CLI chats on disk sent as manifests (against a real local server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import API_KEY, IngestServer
from ctxkit.agents.gemini_cli import ChatReader, transcript_calls, transcript_files
from ctxkit.cli import main
from ctxkit.importer.sessions import NOT_ITEMISED

SESSION = "0d6c5f7e-4b1a-4c1e-9d35-8a1f2e3b4c5d"
ROOT = "/src/app"
CONTEXT = f"<session_context>\nThis is the Gemini CLI.\n- **Workspace Directories:**\n  - {ROOT}\n</session_context>"
NOTE = "The refund rate is 0.0321.\n"
SNAPSHOT = "<state_snapshot>\n<key_knowledge>notes.md was read.</key_knowledge>\n</state_snapshot>"
MODEL = "gemini-3.8-flash"


def _tokens(prompt: int, output: int = 10) -> dict:
    return {"input": prompt, "output": output, "cached": 500, "thoughts": 4, "tool": 3,
            "total": prompt + output + 4 + 3}


def _message(kind: str, message_id: str, content: object, at: str, **fields: object) -> dict:
    return {"id": message_id, "timestamp": f"2026-12-01T10:00:{at}.000Z", "type": kind, "content": content, **fields}


def _read(call_id: str, at: str) -> dict:
    """A gemini message that asked for read_file, as the CLI writes it once the tool ran."""
    return _message("gemini", call_id, "", at, tokens=_tokens(900), model=MODEL,
                    thoughts=[{"subject": "Reading", "description": "the note first"}],
                    toolCalls=[{"id": f"read_file__{call_id}-c", "name": "read_file",
                                "args": {"file_path": "notes.md"}, "status": "success",
                                "result": [{"functionResponse": {"id": f"read_file__{call_id}-c", "name": "read_file",
                                                                 "response": {"output": NOTE}}}]}])


def _result(call_id: str, at: str) -> dict:
    return _message("user", f"{call_id}-r", [{"functionResponse": {"id": f"read_file__{call_id}-c", "name": "read_file",
                                                                   "response": {"output": NOTE}}}], at)


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    """One project's chat: a read of a note, a compression (the CLI's ``$set`` of a history that
    opens with its snapshot), the same read again; a record that is not JSON and a last record
    cut before its newline. Another project's chat beside it."""
    project = tmp_path / "tmp" / "app"
    (project / "chats").mkdir(parents=True)
    (project / ".project_root").write_text(ROOT)
    context = _message("user", "ctx", [{"text": CONTEXT}], "00")
    asked = _read("g1", "02")
    records = [
        {"sessionId": SESSION, "projectHash": "h", "startTime": "2026-12-01T10:00:00.000Z", "kind": "main"},
        {"$set": {"messages": [context]}},
        _message("user", "u1", [{"text": "read notes.md"}], "01"),
        {"$set": {"lastUpdated": "2026-12-01T10:00:01.000Z"}},
        {**asked, "toolCalls": None},  # written first without its tool call, then again with it
        {"$set": {"lastUpdated": "2026-12-01T10:00:02.000Z"}},
        asked,
        _result("g1", "03"),
        _message("gemini", "g2", "It says the rate is 0.0321.", "04", tokens=_tokens(1000), model=MODEL),
        "{this is not json",
        {"$set": {"sessionId": SESSION}},
        {"$set": {"messages": [context, _message("user", "s1", [{"text": SNAPSHOT}], "05"),
                               _message("gemini", "s2", [{"text": "Got it. Thanks for the additional context!"}],
                                        "05")]}},
        _message("user", "u2", [{"text": "read notes.md again"}], "06"),
        _read("g3", "07"),
        _result("g3", "08"),
        _message("gemini", "g4", "Still 0.0321.", "09", tokens=_tokens(700), model=MODEL),
    ]
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    (project / "chats" / "session-2026-12-01T10-00-0d6c5f7e.jsonl").write_text(
        "\n".join(lines) + '\n{"id": "g5", "type": "gem', encoding="utf-8")
    other = tmp_path / "tmp" / "other"
    (other / "chats").mkdir(parents=True)
    (other / ".project_root").write_text("/src/other")
    (other / "chats" / "session-2026-12-01T11-00-11111111.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"sessionId": "other-session", "projectHash": "h2", "startTime": "2026-12-01T11:00:00.000Z"},
        _message("user", "o1", "hi", "10"),
        _message("gemini", "o2", "Hello.", "11", tokens=_tokens(300), model=MODEL),
    ]) + "\n", encoding="utf-8")
    return tmp_path / "tmp"


def test_it_rebuilds_each_answer_of_a_chat_as_a_generate_content_call(chats: Path) -> None:
    [path] = transcript_files(str(chats), ROOT)
    calls = [call for call, _end in transcript_calls(path)]
    assert [c.key for c in calls] == ["g1", "g2", "g3", "g4"]
    first, answered, again, _last = calls
    assert (first.session, first.cwd, first.exact) == (SESSION, ROOT, False)
    assert first.path == f"/v1beta/models/{MODEL}:generateContent"
    # The session context and the prompt in one user content, as the CLI sends them.
    assert first.request == {"contents": [{"role": "user", "parts": [{"text": CONTEXT}, {"text": "read notes.md"}]}]}
    call = {"functionCall": {"id": "g1-c", "name": "read_file", "args": {"file_path": "notes.md"}}}
    result = {"functionResponse": {"id": "g1-c", "name": "read_file", "response": {"output": NOTE}}}
    assert first.response["candidates"][0]["content"]["parts"] == [
        {"text": "**Reading** the note first", "thought": True}, call]
    assert first.response["usageMetadata"] == {"promptTokenCount": 900, "candidatesTokenCount": 10,
                                               "cachedContentTokenCount": 500, "thoughtsTokenCount": 4,
                                               "toolUsePromptTokenCount": 3, "totalTokenCount": 917}
    assert first.response["modelVersion"] == MODEL and "responseId" not in first.response
    assert answered.request["contents"][1:] == [{"role": "model", "parts": [call]}, {"role": "user", "parts": [result]}]
    # After the compression: the snapshot after the session context, the CLI's answer to it, the prompt.
    assert again.request["contents"] == [
        {"role": "user", "parts": [{"text": CONTEXT}, {"text": SNAPSHOT}]},
        {"role": "model", "parts": [{"text": "Got it. Thanks for the additional context!"}]},
        {"role": "user", "parts": [{"text": "read notes.md again"}]}]
    assert first.started < answered.started < again.started


def test_it_starts_after_the_calls_already_read(chats: Path) -> None:
    [path] = transcript_files(str(chats), ROOT)
    read = list(transcript_calls(path))
    ends = [end for _call, end in read]
    assert ends == sorted(ends)
    assert [c.key for c, _end in transcript_calls(path, ends[1])] == ["g3", "g4"]
    assert list(transcript_calls(path, ends[-1])) == []


def _import(chats: Path, server: IngestServer, *more: str) -> int:
    return main(["import", "--gemini", str(chats), "--host", server.url, "--api-key", API_KEY, *more])


def test_it_imports_a_chat_once_with_its_compression_and_reports_malformed_records(
        chats: Path, server: IngestServer, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert _import(chats, server, "--project-dir", ROOT) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "sessions=1 calls=4 skipped=0 malformed=2 rejected=0 spooled=0"
    assert "session-2026-12-01T10-00-0d6c5f7e.jsonl:10: not JSON" in err
    assert "session-2026-12-01T10-00-0d6c5f7e.jsonl:17: truncated line" in err
    stored = sorted(server.stored.values(), key=lambda m: m["step"])
    assert [m["step"] for m in stored] == [0, 1, 2, 3]
    assert {m["run_id"] for m in stored} == {f"session-{SESSION}"}
    assert all(NOT_ITEMISED in m["warnings"] for m in stored)
    assert all(m["provider"] == "google" and m["model"] == MODEL for m in stored)
    assert not any(i["kind"] in ("system", "tools") for m in stored for i in m["items"])
    assert stored[0]["usage"]["input_tokens"] == 903 and stored[0]["usage"]["cache_read_tokens"] == 500
    assert [len(m.get("compactions") or []) for m in stored] == [0, 0, 1, 0]
    [compaction] = stored[2]["compactions"]
    assert (compaction["strategy"], compaction["tokens_before"], compaction["tokens_after"]) == (
        "client_summary", 1003, 903)
    summary = next(i for i in stored[2]["items"] if i["kind"] == "summary")
    assert compaction["summary_item"] == summary["id"]

    requests = len(server.requests)
    assert _import(chats, server, "--project-dir", ROOT) == 0
    # Read again from where it stopped: the record cut short, still not whole, is all that is new.
    assert capsys.readouterr().out.strip().startswith("sessions=0 calls=0 skipped=0 malformed=1")
    assert len(server.requests) == requests and len(server.stored) == 4

    assert _import(chats, server) == 0  # every project's chats: the other one's call only
    assert capsys.readouterr().out.strip().startswith("sessions=1 calls=1 skipped=0")
    assert len(server.stored) == 5


def test_it_drops_the_messages_a_rewind_took_back(tmp_path: Path) -> None:
    chat = tmp_path / "tmp" / "app" / "chats" / "session-2026-12-01T10-00-0d6c5f7e.jsonl"
    chat.parent.mkdir(parents=True)
    chat.write_text("\n".join(json.dumps(r) for r in [
        {"sessionId": SESSION, "projectHash": "h"},
        _message("user", "u1", "first try", "01"),
        _message("gemini", "g1", "First answer.", "02", tokens=_tokens(100), model=MODEL),
        _message("info", "i1", "Rewinding.", "03"),
        {"$rewindTo": "u1"},
        _message("user", "u2", "second try", "04"),
        _message("gemini", "g2", "Second answer.", "05", tokens=_tokens(90), model=MODEL),
    ]) + "\n", encoding="utf-8")
    calls = [call for call, _end in transcript_calls(str(chat))]
    assert [c.key for c in calls] == ["g1", "g2"]
    assert calls[1].request == {"contents": [{"role": "user", "parts": [{"text": "second try"}]}]}
    assert calls[1].cwd == ""  # no .project_root beside the chats


def test_it_reads_a_growing_chat_once_and_waits_for_the_tool_calls(tmp_path: Path) -> None:
    chat = tmp_path / "session-2026-12-01T10-00-0d6c5f7e.jsonl"
    asked = _read("g1", "02")

    def write(*records: dict) -> None:
        with chat.open("a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in records))

    write({"sessionId": SESSION, "projectHash": "h"}, _message("user", "u1", "read notes.md", "01"),
          {**asked, "toolCalls": None})
    reader = ChatReader(str(chat))
    assert list(reader.read()) == []
    call, end, whole = reader.last()
    assert (call.key, end, whole) == ("g1", chat.stat().st_size, False)  # its tool calls may follow
    write({"$set": {"lastUpdated": "2026-12-01T10:00:02.000Z"}}, asked)
    assert list(reader.read()) == []
    call, end, whole = reader.last()
    assert whole and end == chat.stat().st_size
    assert call.response["candidates"][0]["content"]["parts"][-1]["functionCall"]["name"] == "read_file"
    write(_result("g1", "03"))
    [(done, at)] = list(reader.read())
    assert (done.key, at) == ("g1", end) and reader.last() is None
