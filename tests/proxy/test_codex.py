"""The real Codex CLI through ctxkit proxy: ``codex exec`` (``@openai/codex``, a native binary
pinned in tests/clients/codex/package-lock.json, installed with ``npm ci`` when node_modules is
absent) runs offline against a stand-in of the Responses API (tests/proxy/codex_standin.py),
its ``config.toml`` naming the proxy as its provider's ``base_url`` (tests/proxy/codex_session.py).
Two turns: the model asks for ``exec_command`` on a note, the CLI runs it and sends the output
back, the model answers; then ``codex exec resume --last`` asks once more. The three calls reach
the live ctxview server as one run, in order, with Codex's developer instructions and tool
definitions as items, the usage the stand-in reported, and the key nowhere in the database."""

from __future__ import annotations

import io
import json
import time
import urllib.request

import pytest
from django.core.management import call_command

from tests.proxy.codex_session import CLI_DIR, KEY, MODEL, run_session
from tests.proxy.codex_standin import CodexStandIn
from tests.proxy.proxy_support import npm_ci, running_proxy


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _texts(content: list[dict]) -> str:
    return "\n".join(part["text"] for part in content)


@pytest.mark.django_db(transaction=True)
def test_it_records_a_codex_session_as_one_run(live_server, key, sender, tmp_path, client, owner, project):
    npm_ci(CLI_DIR)
    with CodexStandIn() as provider, running_proxy(provider.url, sender) as proxy:
        note, answers = run_session(proxy.url, tmp_path)
        assert answers == ["The note says: The refund rate is 0.0321.", "Noted: who approves the refunds?"]
        sent = [body for method, path, _, body in provider.received if (method, path) == ("POST", "/v1/responses")]
        usages = list(provider.usages.values())
        assert len(sent) == len(provider.received) == 3
        for _, _, headers, _ in provider.received:  # what reached the provider: the CLI's own headers
            assert headers["authorization"] == f"Bearer {KEY}" and headers["originator"] == "codex_exec"
            assert not any(name.startswith("x-ctxview") for name in headers)
        deadline = time.monotonic() + 20
        while True:
            proxy.capture.flush(2)
            runs = _get(live_server, key, "/api/v1/runs")["results"]
            if sum(r["call_count"] for r in runs) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)

    [run] = runs
    calls = _get(live_server, key, f"/api/v1/runs/{run['run_id']}/calls")["results"]
    details = sorted((_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for c in calls), key=lambda c: c["step"])
    assert [c["step"] for c in details] == [0, 1, 2]
    assert [c["started_at"] for c in details] == sorted(c["started_at"] for c in details)
    assert usages[0]["input_tokens"] < usages[1]["input_tokens"] < usages[2]["input_tokens"]  # counted from each
    for call, body, reported in zip(details, sent, usages, strict=True):
        assert (call["agent"], call["model"], call["provider"]) == ("codex_exec", MODEL, "openai")
        usage = (call["input_tokens"], call["cache_read_tokens"], call["output_tokens"], call["reasoning_tokens"])
        assert usage == (reported["input_tokens"], reported["input_tokens_details"]["cached_tokens"],
                         reported["output_tokens"], reported["output_tokens_details"]["reasoning_tokens"])
        # Codex's instructions arrive as developer messages at the head of ``input``: system items.
        developer = [_texts(i["content"]) for i in body["input"] if i.get("role") == "developer"]
        assert developer and developer[0].startswith("You are a coding agent running in the Codex CLI")
        assert [i["text"] for i in call["items"] if i["kind"] == "system"] == developer
        # Each tool definition is an item, in the order sent.
        tools = [i for i in call["items"] if i["kind"] == "tools"]
        assert [json.loads(i["text"]) for i in tools] == body["tools"]
        assert [i["label"] for i in tools] == [t.get("name") or t["type"] for t in body["tools"]]  # as Codex names them
        assert "exec_command" in {t.get("name") for t in body["tools"]}
        assert [s["name"] for s in call["prefix_segments"]][:2] == ["system", "tools"]
    read, answered, resumed = details
    assert [i["text"] for i in read["items"] if i["kind"] == "task"] == [
        next(_texts(i["content"]) for i in sent[0]["input"] if i.get("role") == "user")]
    assert next(i for i in read["items"] if i["kind"] == "user")["text"] == f"read {note} and tell me what it says"
    # The CLI ran the function call; its output went back with the call's id.
    tool_call = next(i for i in answered["items"] if i["kind"] == "history" and i["group"] == "call_standin_1")
    # Its arguments as canonical JSON, so the same call in another key order or spacing is the same call.
    assert json.loads(tool_call["text"]) == {"name": "exec_command",
                                             "arguments": json.dumps({"cmd": f"cat {note}"}, separators=(",", ":"))}
    result = next(i for i in answered["items"] if i["kind"] == "tool_result")
    assert result["group"] == "call_standin_1" and "The refund rate is 0.0321." in result["text"]
    assert (tool_call["label"], result["label"]) == ("exec_command call · turn 1", "exec_command result · turn 1")
    # The resumed session carries the first turn and asks the second.
    assert next(i for i in resumed["items"] if i["kind"] == "user")["label"] == "user · turn 2"
    assert next(i for i in resumed["items"] if i["kind"] == "user")["text"] == "who approves the refunds?"
    assert any(i["kind"] == "tool_result" for i in resumed["items"])

    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/calls/{answered['call_id']}/").content.decode()
    assert f"Tool definitions: built-in {len(sent[1]['tools'])}, MCP 0." in page
    assert '<b class="label">exec_command result · turn 1</b>' in page
    dump = io.StringIO()
    call_command("dumpdata", stdout=dump)
    assert "The refund rate is 0.0321." in dump.getvalue()  # the dump holds what was recorded...
    assert KEY not in dump.getvalue()  # ...and not the key
