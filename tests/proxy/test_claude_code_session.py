"""The real Claude Code CLI over a session through ctxkit proxy, compaction included: five
``claude -p`` turns (tests/proxy/claude_code_session.py) against the stand-in provider, ``--continue``
carrying one session, a Read tool call on a note, ``/compact`` with a summary that leaves out
the note's refund rate, one turn on the compacted history; then a second session. Checked
through the live ctxview server: one run with steps 0..5 in order, the tool call and its
result, the cache cause of the system prompt line a later launch appended and of the line the
second session's prompt gained, the window by category on the call page, the compaction on the
call after it (tokens before and after, summary item, the lost evidence and the lost watched
fact, traced to the compaction) and on the compaction review page. And the CLI's own compaction
on a full window (trigger ``auto``)."""

from __future__ import annotations

import json
import time
import urllib.request
from types import SimpleNamespace

import pytest

from ctxkit import window_breakdown
from ctxkit.agents.claude_code import OPENING as CLAUDE_CODE_OPENING
from manifests import tasks
from manifests.analysis.cache_words import previous_run_call
from manifests.facts import FactSpec, create_fact
from manifests.models import CacheEvent, Call
from tests.html_page import parse
from tests.proxy.claude_code_session import APPENDED, CLI_DIR, KEY, claude, environment, run_session
from tests.proxy.claude_code_standin import SUMMARY_REQUEST, ClaudeCodeStandIn
from tests.proxy.proxy_support import KeptManifests, npm_ci, running_proxy

NEW_SESSION = "a new session starts here"
SECOND_LINE = "Answer in plain words."


def _window_row(page: str, category: str) -> list[str]:
    row = parse(page).one(f'tr[data-category="{category}"]')
    return [cell.text for cell in row.elements() if cell.tag in ("th", "td")]


def _wait_for_calls(live_server, key: str, proxy, run_id: str, count: int) -> list[dict]:
    """The run's calls once ``count`` are stored, analysed as the worker does: without a broker
    the server analyses a batch once its transaction commits (so a call can be listed before
    its cache event exists); with one (CI's PostgreSQL run) the analysis waits for a worker this
    test does not start, so the task body runs here (a no-op for calls analysed already)."""
    deadline = time.monotonic() + 20
    while True:
        proxy.capture.flush(2)
        calls = _get(live_server, key, f"/api/v1/runs/{run_id}/calls")["results"]
        if len(calls) >= count or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    tasks.analyze_calls(list(Call.objects.filter(run__run_id=run_id).values_list("pk", flat=True)))
    return calls


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_claude_code_session_with_compaction_is_one_run(live_server, key, sender, tmp_path, client, owner,
                                                        project):
    npm_ci(CLI_DIR)
    create_fact(project=project, spec=FactSpec(label="refund rate", text="The refund rate is 0.0321"))
    with ClaudeCodeStandIn(sized_usage=True, cold_on=NEW_SESSION) as provider, \
            running_proxy(provider.url, sender) as proxy:
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
        calls = _wait_for_calls(live_server, key, proxy, f"session-{session}", 6)
        # A second session (no --continue) whose system prompt gained a line since the first
        # one, and whose first call found nothing cached.
        env = environment(proxy.url, tmp_path / "home")
        assert claude(["-p", "--system-prompt-snapshot", "off", "--append-system-prompt", SECOND_LINE, NEW_SESSION],
                      work=tmp_path / "work", env=env) == f"Noted: {NEW_SESSION}"
        [second] = {headers["x-claude-code-session-id"] for _, path, headers, _ in provider.received
                    if path.startswith("/v1/messages") and headers["x-claude-code-session-id"] != session}
        [new_first] = _wait_for_calls(live_server, key, proxy, f"session-{second}", 1)

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

    # The third launch re-renders the system prompt with a line appended (the CLI then also
    # words its first line differently): the cache cause of its call names the first changed line.
    system = [next(seg["text"] for seg in c["prefix_segments"] if seg["name"] == "system") for c in details[2:4]]
    assert APPENDED not in system[0] and APPENDED in system[1]
    event = CacheEvent.objects.get(call__call_id=details[3]["call_id"])
    assert (event.cause, event.changed_segment) == ("prefix_changed", "system")
    first_changed = next(n for n, (a, b) in enumerate(zip(*(t.split("\n") for t in system)), 1) if a != b)
    assert event.detail.startswith(f"system prompt line {first_changed} changed: ")

    # The window as the CLI's own /context shows it, on the call page.
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/calls/{answered['call_id']}/").content.decode()
    expected = window_breakdown([SimpleNamespace(**i) for i in answered["items"]], answered["window"],
                                answered["input_tokens"])
    sent_tools = model_calls[1][3]["tools"]  # what the CLI sent with its second call
    assert expected.items["tools"] == len(sent_tools) and expected.items["mcp_tools"] == 0
    assert expected.tokens["system"] and expected.tokens["messages"] and expected.tokens["tool_results"]
    for category in ("system", "tools", "messages", "tool_results"):
        assert _window_row(page, category)[1] == str(expected.tokens[category]), category
    assert f"Tool definitions: built-in {len(sent_tools)}, MCP 0." in page

    # The second session's first call, against the first session's last call: the line added.
    new_first = _get(live_server, key, f"/api/v1/calls/{new_first['call_id']}")
    event = CacheEvent.objects.select_related("previous_call").get(call__call_id=new_first["call_id"])
    assert (event.cause, event.changed_segment) == ("prefix_changed", "system")
    assert event.previous_call.call_id == after["call_id"]
    old, new = (next(seg["text"] for seg in c["prefix_segments"] if seg["name"] == "system")
                for c in (after, new_first))
    assert SECOND_LINE not in old and SECOND_LINE in new
    line = next(n for n, (a, b) in enumerate(zip(old.split("\n"), new.split("\n")), 1) if a != b)
    assert event.detail.startswith(f"since {previous_run_call(after['call_id'])}: system prompt line {line} ")

    [compaction] = after["compactions"]
    summary = next(i for i in after["items"] if i["kind"] == "summary")
    assert summary["text"].startswith(CLAUDE_CODE_OPENING)
    assert "0.0321" not in summary["text"]
    assert compaction["strategy"] == "client_summary" and compaction["trigger"] == "manual"
    assert compaction["summary_item"] == summary["id"]
    assert compaction["tokens_before"] == summarising["input_tokens"]
    assert compaction["tokens_after"] == after["input_tokens"] < summarising["input_tokens"]
    # Claude Code keeps the last answer verbatim after its summary ("Noted: draft a one-line
    # reply..."), no user turn of its own.
    assert compaction["kept_turns"] == 0
    declared, watched = compaction["invariants"]
    assert (declared["name"], declared["ok"], declared["lost"]) == ("required_evidence", False, ["refund_rate"])
    # The watched fact: held by the call before the compaction, lost by its summary.
    assert (watched["name"], watched["ok"], watched["lost"]) == ("required_evidence", False, ["refund rate"])
    fact = next(e for e in after["evidence"] if e["key"] == "fact:refund rate")
    assert fact["present"] is False
    lost = next(a for a in after["attributions"] if a["evidence_key"] == "fact:refund rate")
    assert (lost["cause"], lost["is_risk"]) == ("compaction", False)
    assert next(e for e in summarising["evidence"] if e["key"] == "fact:refund rate")["present"] is True
    assert not any(i["kind"] == "tool_result" for i in after["items"])
    assert KEY not in json.dumps(details)

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
