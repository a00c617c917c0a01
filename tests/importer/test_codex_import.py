"""``ctxkit import --codex`` over the rollout the real Codex CLI wrote (tests/proxy/codex_session.py's
``run_compacting_session``: three turns, a function call reading a note, Codex's own compaction
past ``model_auto_compact_token_limit``, the note read again) against the stand-in, through the
proxy at the same time: each imported call has the run, step, usage, messages, tool calls and
compaction the proxy recorded for it (Codex's instructions are its developer messages; the tool
definitions are not in the rollout), the re-read is attributed to the compaction, and imported
into the live server a second time it stores nothing."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import msgspec
import pytest

from ctxkit.agents import codex
from ctxkit.cli import main
from ctxkit.importer.sessions import NOT_ITEMISED, SOURCES, import_transcripts
from manifests.analysis.rereads import find
from manifests.models import Call, ReRead
from tests.proxy.codex_session import BRANCH, CLI_DIR, MODEL, run_compacting_session
from tests.proxy.codex_standin import COMPACTION_ASK, SUMMARY, CodexStandIn
from tests.proxy.proxy_support import KeptManifests, npm_ci, running_proxy
from tests.support import analyse_waiting


def _items(manifest, skip: tuple[str, ...] = ()) -> list[dict]:
    """Its items as dicts, without the places that count them (and without the kinds in ``skip``)."""
    items = [msgspec.to_builtins(i) for i in manifest.items]
    return [{k: v for k, v in i.items() if k not in ("id", "position", "source_ref")}
            for i in items if i["kind"] not in skip]


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_it_imports_a_real_codex_session_with_its_compaction_and_reread(live_server, key, sender, tmp_path: Path,
                                                                        monkeypatch, capsys):
    npm_ci(CLI_DIR)
    live = KeptManifests()
    with CodexStandIn() as provider, running_proxy(provider.url, live) as proxy:
        note, answers = run_compacting_session(proxy.url, tmp_path)
        proxy.capture.flush(10)
    assert answers == ["The note says: The refund rate is 0.0321.", f"Noted: {SUMMARY}",
                       "The note says: The refund rate is 0.0321."]
    sent = [body for method, path, _, body in provider.received if (method, path) == ("POST", "/v1/responses")]
    usages = list(provider.usages.values())
    # Codex compacted once, by itself: after the function call reading the ledger (step 2).
    asks = [n for n, body in enumerate(sent) if COMPACTION_ASK in json.dumps(body["input"][-1])]
    assert (len(sent), asks) == (7, [3])

    sessions = tmp_path / "home" / ".codex" / "sessions"
    imported = KeptManifests()
    summary = import_transcripts(SOURCES["codex"], str(sessions), imported)
    assert (summary.calls, len(summary.sessions), summary.malformed) == (7, 1, [])
    [rollout] = codex.transcript_files(str(sessions), str(note.parent))
    assert {(c.cwd, c.git_branch) for c, _ in codex.transcript_calls(rollout)} == {(str(note.parent), BRANCH)}
    mine = sorted(imported.manifests, key=lambda m: m.step)
    theirs = sorted(live.manifests, key=lambda m: m.step)
    assert [m.step for m in mine] == [m.step for m in theirs] == list(range(7))
    for step, (one, other, body, usage) in enumerate(zip(mine, theirs, sent, usages, strict=True)):
        assert (one.run_id, one.agent, one.model, one.usage) == (other.run_id, other.agent, other.model, other.usage)
        assert (one.usage.input_tokens, one.usage.cache_read_tokens) == (
            usage["input_tokens"], usage["input_tokens_details"]["cached_tokens"])
        # Messages, function calls and outputs as the proxy itemised them; the developer messages
        # but the first (Codex's base instructions, which it trims per model before sending).
        assert _items(one, ("system", "tools")) == _items(other, ("system", "tools")), step
        assert [i.text for i in one.items if i.kind == "system"][1:] == \
            [i.text for i in other.items if i.kind == "system"][1:]
        assert not any(i.kind == "tools" for i in one.items) and NOT_ITEMISED in one.warnings
        assert len([i for i in other.items if i.kind == "tools"]) == len(body["tools"])
        assert [(c.strategy, c.tokens_before, c.tokens_after, c.kept_turns) for c in one.compactions] == \
            [(c.strategy, c.tokens_before, c.tokens_after, c.kept_turns) for c in other.compactions]
    assert theirs[0].run_id.startswith("session-")
    [compaction] = mine[4].compactions  # the call after the compaction request, with the shorter history
    assert (compaction.strategy, compaction.tokens_before, compaction.tokens_after, compaction.kept_turns) == (
        "client_summary", usages[3]["input_tokens"], usages[4]["input_tokens"], 2)  # both prompts kept
    assert not any(m.compactions for m in mine if m is not mine[4])
    # The note read again after the compaction lost its first result: a re-read caused by it.
    [reread] = find(mine)
    assert (reread.call, reread.loss.cause, reread.loss.cause_ref) == (6, "compaction", compaction.id)
    assert reread.tool.startswith("exec_command result")
    assert (reread.loss.result_call, reread.loss.lost_call) == (3, 4)

    # The import rebuilds the calls under the ids the proxy gave them: the response ids.
    assert [m.call_id for m in mine] == [m.call_id for m in theirs] == list(provider.usages)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    argv = ["import", "--codex", str(sessions), "--host", live_server.url, "--api-key", key]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=1 calls=7 ")
    [run] = _get(live_server, key, "/api/v1/runs")["results"]
    assert (run["run_id"], run["call_count"]) == (mine[0].run_id, 7)
    assert (run["cwd"], run["git_branch"]) == (str(note.parent), BRANCH)  # from the rollout's session_meta
    calls = sorted(_get(live_server, key, f"/api/v1/runs/{run['run_id']}/calls")["results"], key=lambda c: c["step"])
    details = [_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for c in calls]
    assert [(c["step"], c["model"], c["agent"], c["input_tokens"]) for c in details] == [
        (n, MODEL, "codex_exec", u["input_tokens"]) for n, u in enumerate(usages)]
    assert [bool(c["compactions"]) for c in details] == [n == 4 for n in range(7)]
    analyse_waiting()
    [row] = ReRead.objects.all()
    assert (row.step, row.tool, row.cause, row.cause_ref) == (6, reread.tool, "compaction", compaction.id)
    assert Call.objects.get(pk=row.lost_call_id).step == 4
    assert note.read_text() in row_text(details[6], row.result_item)

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh-state"))  # rebuilt and sent again: duplicates
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=1 calls=7 ")
    assert len(_get(live_server, key, f"/api/v1/runs/{run['run_id']}/calls")["results"]) == 7
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # its own state: nothing read again
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=0 calls=0 ")
    # The same session as the proxy captured it, sent after the import: each call is stored once.
    for manifest in theirs:
        sender.capture(manifest)
    assert sender.flush(timeout=10)
    assert sender.stats()["rejected"] == 0  # each answered duplicate: the imported copy stays
    assert sorted(c["call_id"] for c in _get(live_server, key, f"/api/v1/runs/{run['run_id']}/calls")["results"]) \
        == sorted(provider.usages)


def row_text(detail: dict, item_id: str) -> str:
    return next(i["text"] for i in detail["items"] if i["id"] == item_id)
