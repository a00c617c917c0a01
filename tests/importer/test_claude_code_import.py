"""``ctxkit import`` over the transcripts the real Claude Code CLI wrote (tests/proxy/claude_code_session.py's
``run_reread_session``: a Read of a note, ``/compact``, the same Read again, a delegation to a sub-agent)
against the stand-in, through the proxy at the same time: each imported call has the id, run, step,
items, usage and sub-agent links the proxy recorded for it, the compaction carries the boundary the
transcript wrote (trigger, tokens before), the sub-agent's own transcript becomes the child run, the
re-read is attributed to the compaction, a second import stores nothing, and the proxy's copy of the
same session adds only the call the transcript does not keep (the summary request)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import msgspec
import pytest

from ctxkit import Client
from ctxkit.agents import claude_code
from ctxkit.cli import main
from ctxkit.importer.sessions import SOURCES, import_transcripts
from manifests.analysis.rereads import find
from manifests.models import Call, ReRead
from tests.proxy.claude_code_session import CLI_DIR, DELEGATED, run_reread_session
from tests.proxy.claude_code_standin import SUMMARY_REQUEST, ClaudeCodeStandIn
from tests.proxy.proxy_support import KeptManifests, npm_ci, running_proxy
from tests.support import analyse_waiting

# The first system block Claude Code sends is a per-request billing header its transcript does not keep.
BILLING = "x-anthropic-billing-header:"
READ = "The note says: The refund rate is 0.0321."


def _items(manifest) -> list[dict]:
    """Its items without the billing header (and without the places that count it)."""
    items = [msgspec.to_builtins(i) for i in manifest.items]
    return [{k: v for k, v in i.items() if k not in ("id", "position", "source_ref")}
            for i in items if not (i.get("text") or "").startswith(BILLING)]


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _stored(live_server, key: str) -> list[dict]:
    """Every call the server holds, through the API's runs and their call lists."""
    runs = _get(live_server, key, "/api/v1/runs?page_size=100")["results"]
    return [c for r in runs for c in _get(live_server, key, f"/api/v1/runs/{r['run_id']}/calls")["results"]]


def _boundary(transcript: str) -> dict:
    """The ``compactMetadata`` of the transcript's one compaction boundary."""
    lines = [json.loads(line) for line in Path(transcript).read_text().splitlines()]
    [boundary] = [line for line in lines if line.get("subtype") == claude_code.COMPACT_BOUNDARY]
    return boundary["compactMetadata"]


@pytest.mark.django_db(transaction=True)
def test_it_imports_a_real_claude_code_session_as_the_proxy_records_it(live_server, key, tmp_path: Path,
                                                                       monkeypatch, capsys):
    npm_ci(CLI_DIR)
    live = KeptManifests()
    with ClaudeCodeStandIn(sized_usage=True) as provider, running_proxy(provider.url, live) as proxy:
        run_reread_session(proxy.url, tmp_path)
        proxy.capture.flush(10)
    sent = [body for _, path, _, body in provider.received if path.startswith("/v1/messages?")]
    asks = [n for n, body in enumerate(sent) if SUMMARY_REQUEST in json.dumps(body["messages"][-1])]
    assert (len(sent), asks, len(live.manifests)) == (8, [2], 8)
    projects = tmp_path / "home" / ".claude" / "projects"
    session_file, agent_file = claude_code.transcript_files(str(projects))
    assert Path(agent_file).parent == Path(session_file).with_suffix("") / "subagents"  # read after its session

    imported = KeptManifests()
    summary = import_transcripts(SOURCES["claude-code"], str(projects), imported)
    # Every call but /compact's own summary request, which the transcript does not keep.
    assert (summary.calls, len(summary.sessions), summary.malformed) == (7, 1, [])
    recorded = {m.call_id: m for m in live.manifests}
    for mine in imported.manifests:
        theirs = recorded[mine.call_id]  # the same call: the id of the message that answered it
        assert mine.call_id.startswith("msg_")
        assert _items(mine) == _items(theirs), mine.step
        assert (mine.run_id, mine.step, mine.parent_run_id, mine.parent_call_id, mine.agent, mine.usage,
                mine.model, mine.outcome, mine.workspace) == \
            (theirs.run_id, theirs.step, theirs.parent_run_id, theirs.parent_call_id, theirs.agent, theirs.usage,
             theirs.model, theirs.outcome, theirs.workspace)
        assert not mine.warnings
    main_run = sorted((m for m in imported.manifests if not m.parent_run_id), key=lambda m: m.step)
    # Step 2 is the summary request the proxy recorded and the transcript does not keep.
    assert [m.step for m in main_run] == [0, 1, 3, 4, 5, 6]
    [unseen] = [m for m in live.manifests if m.call_id not in {i.call_id for i in imported.manifests}]
    assert unseen.step == 2
    # Usage counted from each request (the stand-in's sized usage): it grows with the conversation.
    assert len({m.usage.input_tokens for m in main_run}) == len(main_run)
    kinds = {i.kind for i in main_run[0].items}
    assert {"system", "tools", "tool_result"} <= kinds | {i.kind for i in main_run[1].items}

    # The compaction as the transcript's boundary wrote it, on the call after it.
    facts = _boundary(session_file)
    [compaction] = main_run[2].compactions
    assert (compaction.strategy, compaction.trigger, compaction.tokens_before, compaction.tokens_after) == (
        "client_summary", "manual", facts["preTokens"], main_run[2].usage.input_tokens)
    assert facts["trigger"] == "manual"
    summary_item = next(i for i in main_run[2].items if i.id == compaction.summary_item)
    assert summary_item.kind == "summary" and summary_item.text.startswith(claude_code.OPENING)
    [live_compaction] = recorded[main_run[2].call_id].compactions  # the proxy counts the summary request's input
    assert (live_compaction.id, live_compaction.trigger) == (compaction.id, "manual")
    assert not any(m.compactions for m in imported.manifests if m is not main_run[2])

    # The sub-agent's own transcript: the child run of the call whose Agent tool call started it.
    [child] = [m for m in imported.manifests if m.parent_run_id]
    meta = json.loads(Path(agent_file).with_suffix(".meta.json").read_text())
    assert child.run_id == f"{main_run[0].run_id}/agent-{meta['toolUseId']}"
    assert (child.step, child.parent_run_id, child.parent_call_id, child.agent) == (
        0, main_run[0].run_id, main_run[4].call_id, "claude-cli:general-purpose")
    assert any(f"SUBTASK: {DELEGATED}" in (i.text or "") for i in child.items)

    # The note read again after /compact lost its first result: a re-read the compaction caused.
    [reread] = find(main_run)
    assert (main_run[reread.call].step, reread.loss.cause, reread.loss.cause_ref) == (4, "compaction", compaction.id)
    assert (main_run[reread.loss.result_call].step, main_run[reread.loss.lost_call].step) == (1, 3)

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    argv = ["import", "--claude-code", str(projects), "--host", live_server.url, "--api-key", key]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=1 calls=7 ")
    runs = {r["run_id"]: r for r in _get(live_server, key, "/api/v1/runs")["results"]}
    assert set(runs) == {main_run[0].run_id, child.run_id}
    assert runs[child.run_id]["parent_run_id"] == main_run[0].run_id
    assert sorted((c["step"], c["call_id"]) for c in _stored(live_server, key) if c["run_id"] == main_run[0].run_id) \
        == [(m.step, m.call_id) for m in main_run]
    after = _get(live_server, key, f"/api/v1/calls/{main_run[2].call_id}")
    assert [(c["trigger"], c["tokens_before"]) for c in after["compactions"]] == [("manual", facts["preTokens"])]
    analyse_waiting()
    [row] = ReRead.objects.all()
    assert (row.step, row.tool, row.cause, row.cause_ref) == (4, reread.tool, "compaction", compaction.id)
    assert Call.objects.get(pk=row.lost_call_id).step == 3

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh-state"))  # rebuilt and sent again: duplicates
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=1 calls=7 ")
    assert len(_stored(live_server, key)) == 7
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # its own state: nothing read again
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=0 calls=0 ")

    # The same session as the proxy captured it: stored once, the summary request its one new call.
    sender = Client(key, live_server.url, max_retries=0)
    for manifest in live.manifests:
        sender.capture(manifest)
    assert sender.flush(timeout=20)
    sender.shutdown(timeout=5)
    stored = _stored(live_server, key)
    assert sorted(c["call_id"] for c in stored) == sorted(recorded)
    assert {c["call_id"]: c["step"] for c in stored}[unseen.call_id] == 2
