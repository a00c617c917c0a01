"""The real Claude Code CLI delegating to a sub-agent through ctxkit proxy: ``claude -p
"delegate: ..."`` against the stand-in provider (tests/proxy/claude_code_standin.py), which answers
with a ``tool_use`` of Claude Code's ``Agent`` tool; the CLI runs the sub-agent (its own request,
opening with the delegated prompt, under the session's identity), hands its report back, and the
model answers. Checked through the live ctxview server: the session's run holds the two main
calls as steps 0 and 1, the sub-agent's call is step 0 of the child run linked to the call that
asked for it, and the run page says whose subagent it is."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest

from tests.proxy.claude_code_standin import SUBTASK, ClaudeCodeStandIn
from tests.proxy.proxy_support import npm_ci, running_proxy
from tests.proxy.test_claude_code import CLI_DIR, KEY


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _calls(live_server, key: str, proxy, run_id: str, count: int) -> list[dict]:
    deadline = time.monotonic() + 20
    while True:
        proxy.capture.flush(2)
        calls = _get(live_server, key, f"/api/v1/runs/{run_id}/calls")["results"]
        if len(calls) >= count or time.monotonic() > deadline:
            return sorted((_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for c in calls),
                          key=lambda c: c["step"])
        time.sleep(0.05)


@pytest.mark.django_db(transaction=True)
def test_claude_code_sub_agent_is_a_child_run_of_the_call_that_started_it(live_server, key, sender, tmp_path,
                                                                           client, owner, project):
    npm_ci(CLI_DIR)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    with ClaudeCodeStandIn() as provider, running_proxy(provider.url, sender) as proxy:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": proxy.url,
               "ANTHROPIC_API_KEY": KEY, "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
               "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
        out = subprocess.run([str(CLI_DIR / "node_modules" / ".bin" / "claude"), "-p",
                              "delegate: count the refund rules", "--tools", "Read,Agent"],
                             cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "The sub-agent reports: Done: count the refund rules"
        model_calls = [r for r in provider.received if r[1].startswith("/v1/messages?beta=true")]
        assert len(model_calls) == 3
        session = model_calls[0][2]["x-claude-code-session-id"]
        assert {r[2]["x-claude-code-session-id"] for r in model_calls} == {session}
        tool_use_id = "toolu_standin_agent_1"
        parent_run, child_run = f"session-{session}", f"session-{session}/agent-{tool_use_id}"
        main = _calls(live_server, key, proxy, parent_run, 2)
        [child] = _calls(live_server, key, proxy, child_run, 1)

    assert [(c["step"], c["finish_reason"]) for c in main] == [(0, "tool_use"), (1, "end_turn")]
    assert all(c["parent_call_id"] is None for c in main)
    assert (child["step"], child["finish_reason"], child["agent"]) == (0, "end_turn", "claude-cli:general-purpose")
    assert child["parent_call_id"] == main[0]["call_id"]
    assert any(SUBTASK in (i["text"] or "") for i in child["items"])
    runs = {r["run_id"]: r for r in _get(live_server, key, "/api/v1/runs")["results"]}
    assert runs[child_run]["parent_run_id"] == parent_run and runs[parent_run]["parent_run_id"] is None
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/runs/{child_run}/").content.decode()
    assert f"subagent of {parent_run}" in page
