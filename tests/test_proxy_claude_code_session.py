"""The real Claude Code CLI over a session through ctxkit proxy, compaction included: five
``claude -p`` turns (tests/claude_code_session.py) against the stand-in provider, ``--continue``
carrying one session, a Read tool call on a note, ``/compact`` with a summary that leaves out
the note's refund rate, one turn on the compacted history. Checked through the live ctxview
server: one run with steps 0..5 in order, the tool call and its result, the compaction on the
call after it (tokens before and after, summary item, the lost evidence) and on the
compaction review page. And the CLI's own compaction on a full window (trigger ``auto``)."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from tests.claude_code_session import CLI_DIR, KEY, claude, environment, run_session
from tests.claude_code_standin import SUMMARY_REQUEST, ClaudeCodeStandIn
from tests.proxy_support import KeptManifests, npm_ci, running_proxy


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_claude_code_session_with_compaction_is_one_run(live_server, key, sender, tmp_path, client, owner,
                                                        project):
    npm_ci(CLI_DIR)
    with ClaudeCodeStandIn(sized_usage=True) as provider, running_proxy(provider.url, sender) as proxy:
        note, answers = run_session(proxy.url, tmp_path)
        assert answers == ["The note says: The refund rate is 0.0321.", "Noted: who approves the refunds?",
                           "Noted: draft a one-line reply to the customer", "",
                           "Noted: what was the refund rate again?"]
        model_calls = [r for r in provider.received if r[1].startswith("/v1/messages")]
        assert len(model_calls) == 6
        sessions = {headers["x-claude-code-session-id"] for _, _, headers, _ in model_calls}
        assert len(sessions) == 1  # --continue keeps the CLI's session id
        assert not any(name.startswith("x-ctxview") for _, _, headers, _ in model_calls for name in headers)
        session = sessions.pop()
        deadline = time.monotonic() + 20
        while True:
            proxy.capture.flush(2)
            calls = _get(live_server, key, f"/api/v1/runs/session-{session}/calls")["results"]
            if len(calls) >= 6 or time.monotonic() > deadline:
                break
            time.sleep(0.05)

    details = sorted((_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for c in calls),
                     key=lambda c: c["step"])
    assert [c["step"] for c in details] == [0, 1, 2, 3, 4, 5]
    assert [c["started_at"] for c in details] == sorted(c["started_at"] for c in details)
    read, answered, _, _, summarising, after = details
    assert (read["finish_reason"], answered["finish_reason"]) == ("tool_use", "end_turn")
    tool_use = next(i for i in answered["items"] if i["kind"] == "history" and i["group"] == "toolu_standin_1")
    result = next(i for i in answered["items"] if i["kind"] == "tool_result")
    assert result["group"] == tool_use["group"] and "The refund rate is 0.0321." in result["text"]
    assert "Read" in tool_use["text"] and str(note) in tool_use["text"]

    # The compaction request is a call of the run like any other, with the whole history.
    assert SUMMARY_REQUEST in next(i["text"] for i in summarising["items"] if i["kind"] == "user")
    assert summarising["compactions"] == [] and all(c["compactions"] == [] for c in details[:5])

    [compaction] = after["compactions"]
    summary = next(i for i in after["items"] if i["kind"] == "summary")
    assert summary["text"].startswith("This session is being continued from a previous conversation")
    assert "0.0321" not in summary["text"]
    assert compaction["strategy"] == "client_summary" and compaction["trigger"] == "manual"
    assert compaction["summary_item"] == summary["id"]
    assert compaction["tokens_before"] == summarising["input_tokens"]
    assert compaction["tokens_after"] == after["input_tokens"] < summarising["input_tokens"]
    assert compaction["kept_turns"] == 1  # "draft a one-line reply..." survives verbatim
    [invariant] = compaction["invariants"]
    assert (invariant["name"], invariant["ok"], invariant["lost"]) == ("required_evidence", False, ["refund_rate"])
    assert not any(i["kind"] == "tool_result" for i in after["items"])
    assert KEY not in json.dumps(details)

    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/compactions/")
    assert page.status_code == 200
    assert f'data-compaction="{compaction["id"]}"' in page.content.decode()


def test_claude_code_compacting_on_a_full_window_is_an_auto_compaction(tmp_path):
    npm_ci(CLI_DIR)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    sink = KeptManifests()
    with ClaudeCodeStandIn(sized_usage=True, full_window_on="draft") as provider, \
            running_proxy(provider.url, sink) as proxy:
        env = environment(proxy.url, home)
        answers = [claude(args, work=work, env=env)
                   for args in (["-p", "hello"], ["-p", "--continue", "draft a reply"],
                                ["-p", "--continue", "next please"])]
        assert answers == ["Noted: hello", "Noted: draft a reply", "Noted: next please"]
        assert proxy.capture.flush(10)
    # The full window reported after "draft" makes the CLI summarise before its third turn.
    manifests = sorted(sink.manifests, key=lambda m: m.step)
    assert [m.step for m in manifests] == [0, 1, 2, 3] and len({m.run_id for m in manifests}) == 1
    summarising, after = manifests[2], manifests[3]
    assert any(SUMMARY_REQUEST in (i.text or "") for i in summarising.items) and summarising.compactions == []
    [compaction] = after.compactions
    assert (compaction.strategy, compaction.trigger, compaction.kept_turns) == ("client_summary", "auto", 0)
    assert compaction.tokens_before == summarising.usage.input_tokens
    assert compaction.tokens_after == after.usage.input_tokens
    assert compaction.summary_item == next(i.id for i in after.items if i.kind == "summary")
    assert compaction.invariants == []  # the declared rate was never sent: nothing to lose
