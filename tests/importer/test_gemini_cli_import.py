"""``ctxkit import --gemini`` over the chat the real Gemini CLI wrote (tests/proxy/gemini_cli_session.py:
a read_file tool call, a question, a turn the CLI opens with its own compression, the same read
again) against the stand-in: one run with a call per answer, the usage the stand-in counted, no
system instruction or tools (not itemised), the compression as a compaction whose loss the second
read re-reads; imported a second time it stores nothing."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from ctxkit.cli import main
from ctxkit.importer.sessions import NOT_ITEMISED
from manifests.models import ReRead
from tests.proxy.gemini_cli_session import CLI_DIR, run_compressed_session
from tests.proxy.gemini_cli_standin import READ_TOOL, SNAPSHOT, SUMMARY, GeminiStandIn
from tests.proxy.proxy_support import npm_ci
from tests.support import analyse_waiting


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _usage(sent: dict) -> tuple[int, int, int, int | None]:
    """(input, cache read, output, reasoning) as the Gemini API's usage reads."""
    return (sent["promptTokenCount"] + sent.get("toolUsePromptTokenCount", 0), sent.get("cachedContentTokenCount", 0),
            sent["candidatesTokenCount"] + sent.get("thoughtsTokenCount", 0), sent.get("thoughtsTokenCount"))


@pytest.mark.django_db(transaction=True)
def test_it_imports_a_real_gemini_cli_session_with_its_compression_and_the_reread(
        live_server, key, tmp_path: Path, monkeypatch, capsys, client, owner, project):
    npm_ci(CLI_DIR)
    with GeminiStandIn() as provider:
        note, answers = run_compressed_session(provider.url, tmp_path)
        answered = list(provider.answers)
    assert answers == ["The note says: The refund rate is 0.0321.", "Noted: who approves the refunds?",
                       "Noted: carry on", "The note says: The refund rate is 0.0321."]
    # The turns (the chat keeps a message with tokens for each); the side requests and the
    # compression's own requests are not in it.
    turns = [(body, answer) for path, body, answer in answered if ":streamGenerateContent" in path]
    snapshots = [body for _, body, _ in answered if SNAPSHOT in json.dumps(body.get("systemInstruction"))]
    assert len(turns) == 6 and len(snapshots) == 2  # the snapshot asked for, then checked

    chats = tmp_path / "home" / ".gemini" / "tmp"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    argv = ["import", "--gemini", str(chats), "--host", live_server.url, "--api-key", key]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=1 calls=6 skipped=0 malformed=0 rejected=0 ")

    [run] = _get(live_server, key, "/api/v1/runs")["results"]
    assert run["call_count"] == 6 and run["agent"] == "GeminiCLI" and run["cwd"] == str(tmp_path / "work")
    calls = _get(live_server, key, f"/api/v1/runs/{run['run_id']}/calls")["results"]
    details = sorted((_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for c in calls), key=lambda c: c["step"])
    assert [c["step"] for c in details] == list(range(6))
    assert [(c["input_tokens"], c["cache_read_tokens"], c["output_tokens"], c["reasoning_tokens"]) for c in details] \
        == [_usage(answer["usageMetadata"]) for _, answer in turns]
    for call, (body, _) in zip(details, turns, strict=True):
        assert call["provider"] == "google" and call["model"] == "gemini-3.8-flash"
        assert NOT_ITEMISED in call["warnings"]
        assert not any(i["kind"] in ("system", "tools") for i in call["items"])
        # Everything the CLI sent but its system instruction and tools, text for text.
        sent = [p["text"] for c in body["contents"] for p in c["parts"] if "text" in p]
        assert [i["text"] for i in call["items"] if i["kind"] in ("task", "user", "summary")
                or i["kind"] == "history" and not i["group"]] == sent

    read, answered_note, question, compressed_call, reread, answered_again = details
    result = next(i for i in answered_note["items"] if i["kind"] == "tool_result")
    assert "The refund rate is 0.0321." in result["text"] and result["label"] == f"{READ_TOOL} result · turn 1"
    # The compression: the call that opens with the snapshot, the note's content no longer in it.
    assert [len(c["compactions"]) for c in details] == [0, 0, 0, 1, 0, 0]
    [compaction] = compressed_call["compactions"]
    summary = next(i for i in compressed_call["items"] if i["kind"] == "summary")
    assert summary["text"] == SUMMARY and compaction["summary_item"] == summary["id"]
    assert (compaction["strategy"], compaction["tokens_before"], compaction["tokens_after"]) == (
        "client_summary", question["input_tokens"], compressed_call["input_tokens"])
    assert not any("0.0321" in (i["text"] or "") for i in compressed_call["items"])
    # The same read after it: a re-read of the result the compression lost.
    analyse_waiting()
    row = ReRead.objects.get()
    assert (row.step, row.tool, row.cause, row.cause_ref) == (5, f"{READ_TOOL} result · turn 4", "compaction",
                                                              compaction["id"])
    assert [(c.step if c else None) for c in (row.earlier_call, row.lost_call)] == [2, 3]
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/calls/{compressed_call['call_id']}/").content.decode()
    assert f"cost {row.tokens} re-read tokens in 1 call" in page
    assert reread["step"] == 4 and answered_again["step"] == 5

    assert main(argv) == 0  # its own state: nothing read again
    assert capsys.readouterr().out.startswith("sessions=0 calls=0 ")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh-state"))  # read and sent again: duplicates
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=1 calls=6 ")
    assert len(_get(live_server, key, f"/api/v1/runs/{run['run_id']}/calls")["results"]) == 6
