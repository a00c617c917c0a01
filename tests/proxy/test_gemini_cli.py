"""The real Gemini CLI through ctxkit proxy: ``gemini -p`` (``@google/gemini-cli``, pinned in
tests/clients/gemini_cli/package-lock.json, installed with ``npm ci`` when node_modules is
absent) runs offline against a stand-in of the Gemini API (tests/proxy/gemini_cli_standin.py)
with ``GOOGLE_GEMINI_BASE_URL`` set to the proxy (tests/proxy/gemini_cli_session.py), the proxy
running as ``python -m ctxkit.proxy -v`` so its output can be read. Two turns: the model asks for
``read_file`` on a note, the CLI reads it and sends it back, the model answers; then
``gemini --resume latest`` asks once more. Each run also makes the CLI's side requests on its
small model. The CLI sends its key in ``x-goog-api-key``; one of its side requests is sent again
with the key in the URL (``?key=``), as the REST API also takes it. Checked through the live
ctxview server: one run with every call in step order, the system instruction and each function
declaration as items, the usage the stand-in reported, and neither key in the database or the
proxy's output."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from django.core.management import call_command

from tests.proxy.gemini_cli_session import CLI_DIR, KEY, run_session
from tests.proxy.gemini_cli_standin import READ_TOOL, GeminiStandIn
from tests.proxy.proxy_support import npm_ci, raw_request

URL_KEY = "AIzaSyURLKEYGEMINICLIURLKEYURLKEY00000"


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _usage(sent: dict) -> tuple[int, int, int, int | None]:
    """(input, cache read, output, reasoning) as the Gemini API's usage reads: the prompt count
    holds the cached tokens, tool-use prompt tokens are input, thoughts are output and reasoning
    (not reported when the answer reports none)."""
    return (sent["promptTokenCount"] + sent.get("toolUsePromptTokenCount", 0), sent.get("cachedContentTokenCount", 0),
            sent["candidatesTokenCount"] + sent.get("thoughtsTokenCount", 0), sent.get("thoughtsTokenCount"))


@pytest.mark.django_db(transaction=True)
def test_it_records_a_gemini_cli_session_as_one_run_and_never_the_key(live_server, key, tmp_path, client, owner,
                                                                       project):
    npm_ci(CLI_DIR)
    env = {**os.environ, "CTXVIEW_API_KEY": key, "CTXVIEW_HOST": live_server.url,
           "PYTHONPATH": os.pathsep.join(sys.path)}
    with GeminiStandIn() as provider:
        process = subprocess.Popen([sys.executable, "-m", "ctxkit.proxy", "--port", "0", "-v",
                                    "--gemini-upstream", provider.url], env=env,
                                   stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            lines = [process.stderr.readline()]
            while "listening on " not in lines[-1] and lines[-1]:
                lines.append(process.stderr.readline())
            url = lines[-1].split("listening on ")[1].split(" ")[0]
            note, answers = run_session(url, tmp_path)
            assert answers == ["The note says: The refund rate is 0.0321.", "Noted: who approves the refunds?"]
            # One of the CLI's side requests again, the key in the URL instead of its header.
            side = next(r for r in provider.received if r[1].endswith(":generateContent"))
            headers = {k: v for k, v in side[2].items() if k not in ("x-goog-api-key", "host", "content-length")}
            status, _, _ = raw_request(url, "POST", f"{side[1]}?key={URL_KEY}", json.dumps(side[3]).encode(), headers)
            assert status == 200
        finally:
            process.send_signal(signal.SIGTERM)  # flushes what it recorded on the way out
            out, err = process.communicate(timeout=30)
            err = "".join(lines) + err
        assert process.returncode == 0, err[-2000:]
        received = list(provider.received)
        answers = list(provider.answers)

    # What reached the stand-in: the CLI's own key in its header, the last request's in the URL.
    assert all(h["x-goog-api-key"] == KEY for _, _, h, _ in received[:-1])
    assert received[-1][1].endswith(f":generateContent?key={URL_KEY}") and "x-goog-api-key" not in received[-1][2]
    turns = [body for _, path, _, body in received if ":streamGenerateContent" in path]
    assert len(turns) == 3  # read_file asked for, the note answered, the resumed question
    recorded = [(path, body) for _, path, _, body in received if ":streamGenerateContent" in path
                or ":generateContent" in path]

    deadline = time.monotonic() + 20
    while True:
        runs = _get(live_server, key, "/api/v1/runs")["results"]
        if sum(r["call_count"] for r in runs) >= len(recorded) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    [run] = runs  # the session: its turns, its side requests and the replayed one
    calls = _get(live_server, key, f"/api/v1/runs/{run['run_id']}/calls")["results"]
    details = sorted((_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for c in calls), key=lambda c: c["step"])
    assert [c["step"] for c in details] == list(range(len(recorded)))
    assert [c["started_at"] for c in details] == sorted(c["started_at"] for c in details)
    assert all(c["provider"] == "google" and c["agent"].startswith("GeminiCLI") for c in details)
    # The calls in the order the CLI made them: the model in each call's path.
    assert [c["model"] for c in details] == [path.split("/models/")[1].split(":")[0] for path, _ in recorded]

    # Each call's usage as the stand-in counted it from the request, in the order they were answered.
    assert [(c["input_tokens"], c["cache_read_tokens"], c["output_tokens"], c["reasoning_tokens"]) for c in details] \
        == [_usage(answer["usageMetadata"]) for _, _, answer in answers]
    turn_calls = [c for c, (path, _, _) in zip(details, answers, strict=True) if ":streamGenerateContent" in path]
    assert len(turn_calls) == 3
    for call, body in zip(turn_calls, turns, strict=True):
        # The system instruction and each function declaration, as items named by the tool.
        assert [i["text"] for i in call["items"] if i["kind"] == "system"] == [
            p["text"] for p in body["systemInstruction"]["parts"]]
        declared = [d for t in body["tools"] for d in t["functionDeclarations"]]
        tools = [i for i in call["items"] if i["kind"] == "tools"]
        assert [json.loads(i["text"]) for i in tools] == declared
        names = [d["name"] for d in declared]
        assert [i["label"] for i in tools] == names and READ_TOOL in names
        assert [s["name"] for s in call["prefix_segments"]][:2] == ["system", "tools"]
    asked, answered, resumed = turn_calls
    assert not any(i["kind"] == "tool_result" for i in asked["items"])
    tool_call = next(i for i in answered["items"] if i["kind"] == "history" and i["group"])
    result = next(i for i in answered["items"] if i["kind"] == "tool_result")
    assert json.loads(tool_call["text"]) == {"name": READ_TOOL, "args": {"file_path": str(note)}}
    assert result["group"] == tool_call["group"] and "The refund rate is 0.0321." in result["text"]
    assert (tool_call["label"], result["label"]) == (f"{READ_TOOL} call · turn 1", f"{READ_TOOL} result · turn 1")
    assert next(i for i in resumed["items"] if i["kind"] == "user")["text"] == "who approves the refunds?"

    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/calls/{answered['call_id']}/").content.decode()
    assert f"Tool definitions: built-in {len(tools)}, MCP 0." in page
    assert f'<b class="label">{READ_TOOL} result · turn 1</b>' in page
    dump = io.StringIO()
    call_command("dumpdata", stdout=dump)
    assert "The refund rate is 0.0321." in dump.getvalue()  # the dump holds what was recorded...
    for secret in (KEY, URL_KEY):  # ...and neither key; nor does the proxy's output
        assert secret not in dump.getvalue() and secret not in out and secret not in err
