"""The real Claude Code CLI through ctxkit proxy: ``claude -p`` (``@anthropic-ai/claude-code``,
pinned in tests/clients/claude_code/package-lock.json, installed with ``npm ci`` when node_modules is
absent) runs offline against a stand-in of the Messages API (tests/proxy/claude_code_standin.py)
with ``ANTHROPIC_BASE_URL`` set to the proxy. The model asks for Claude Code's Read tool on a
file in a temporary folder, the CLI reads it and sends the result back, the model answers;
both calls reach the live ctxview server as one run, the CLI's session. The folder's CLAUDE.md,
which the CLI injects into the first user message, is recorded as a ``memory`` item naming the file."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.proxy.claude_code_standin import ClaudeCodeStandIn
from tests.proxy.proxy_support import npm_ci, running_proxy

CLI_DIR = Path(__file__).resolve().parents[1] / "clients" / "claude_code"
KEY = "sk-ant-api03-CLAUDECODEDUMMYKEYDUMMYKEY"


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_claude_code_through_the_proxy_is_recorded_as_its_session(live_server, key, sender, tmp_path):
    npm_ci(CLI_DIR)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    note = work / "note.txt"
    note.write_text("The refund rate is 0.0321.\nsecond line\n")
    (work / "CLAUDE.md").write_text("# Project rules\nQuote files exactly.\n")
    with ClaudeCodeStandIn() as provider, running_proxy(provider.url, sender) as proxy:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": proxy.url,
               "ANTHROPIC_API_KEY": KEY, "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        out = subprocess.run([str(CLI_DIR / "node_modules" / ".bin" / "claude"), "-p",
                              f"read {note} and tell me what it says"],
                             cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "The note says: The refund rate is 0.0321."
        model_calls = [r for r in provider.received if r[1].startswith("/v1/messages?beta=true")]
        assert len(model_calls) == 2
        session = model_calls[0][2]["x-claude-code-session-id"]
        for _, _, headers, _ in model_calls:  # what reached the provider: the CLI's own headers
            assert headers["x-api-key"] == KEY and headers["x-claude-code-session-id"] == session
            assert not any(name.startswith("x-ctxview") for name in headers)
        deadline = time.monotonic() + 20
        while True:
            proxy.capture.flush(2)
            calls = _get(live_server, key, f"/api/v1/runs/session-{session}/calls")["results"]
            if len(calls) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)

    first, second = sorted((_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for c in calls),
                           key=lambda c: c["step"])
    assert (first["step"], second["step"]) == (0, 1)
    assert (first["finish_reason"], second["finish_reason"]) == ("tool_use", "end_turn")
    assert {first["agent"], second["agent"]} == {"claude-cli"}
    for c in (first, second):
        assert (c["input_tokens"], c["cache_read_tokens"], c["cache_write_tokens"]) == (9740, 9000, 700)
        assert [s["name"] for s in c["prefix_segments"]][:2] == ["tools", "system"]
    kinds = [i["kind"] for i in second["items"]]
    assert kinds.count("tools") == len(model_calls[1][3]["tools"]) and "system" in kinds and "task" in kinds
    tool_use = next(i for i in second["items"] if i["kind"] == "history" and i["group"] == "toolu_standin_1")
    result = next(i for i in second["items"] if i["kind"] == "tool_result")
    assert result["group"] == tool_use["group"] and "The refund rate is 0.0321." in result["text"]
    # Named as Claude Code names them: the tools, the Read call and its result in the first turn.
    assert (tool_use["label"], result["label"]) == ("Read call · turn 1", "Read result · turn 1")
    sent_tools = model_calls[1][3]["tools"]
    assert [i["label"] for i in second["items"] if i["kind"] == "tools"] == [t["name"] for t in sent_tools]
    for c in (first, second):
        memory = [i for i in c["items"] if i["kind"] == "memory"]
        assert len(memory) == 1 and memory[0]["source_ref"] == str(work / "CLAUDE.md")
        assert "Quote files exactly." in memory[0]["text"]
    assert KEY not in json.dumps([first, second])
