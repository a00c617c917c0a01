"""``ctxkit import`` over the transcripts the real Claude Code CLI wrote (tests/proxy/claude_code_session.py:
five turns, a Read tool call, ``/compact``) against the stand-in, through the proxy at the same
time: each imported call has the items, usage, run and compaction the proxy recorded for it, and
imported into the live server a second time it stores nothing."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import msgspec
import pytest

from ctxkit.cli import main
from ctxkit.importer.sessions import SOURCES, import_transcripts
from tests.proxy.claude_code_session import CLI_DIR, run_session
from tests.proxy.claude_code_standin import ClaudeCodeStandIn
from tests.proxy.proxy_support import KeptManifests, npm_ci, running_proxy

# The first system block Claude Code sends is a per-request billing header its transcript does not keep.
BILLING = "x-anthropic-billing-header:"


def _items(manifest) -> list[dict]:
    """Its items without the billing header (and without the places that count it)."""
    items = [msgspec.to_builtins(i) for i in manifest.items]
    return [{k: v for k, v in i.items() if k not in ("id", "position", "source_ref")}
            for i in items if not (i.get("text") or "").startswith(BILLING)]


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_it_imports_a_real_claude_code_session_as_the_proxy_records_it(live_server, key, tmp_path: Path,
                                                                       monkeypatch, capsys):
    npm_ci(CLI_DIR)
    live = KeptManifests()
    with ClaudeCodeStandIn(sized_usage=True) as provider, running_proxy(provider.url, live) as proxy:
        run_session(proxy.url, tmp_path, declare_evidence=False)
        proxy.capture.flush(10)
    projects = tmp_path / "home" / ".claude" / "projects"
    imported = KeptManifests()
    summary = import_transcripts(SOURCES["claude-code"], str(projects), imported)
    # The transcript holds every call but /compact's own summary request (step 4 through the proxy).
    assert (summary.calls, len(summary.sessions), summary.malformed) == (5, 1, [])
    by_step = sorted(imported.manifests, key=lambda m: m.step)
    recorded = sorted(live.manifests, key=lambda m: m.step)
    assert [m.step for m in recorded] == [0, 1, 2, 3, 4, 5]
    del recorded[4]
    for mine, theirs in zip(by_step, recorded, strict=True):
        assert _items(mine) == _items(theirs), mine.step
        assert (mine.usage, mine.run_id, mine.agent, mine.model, mine.outcome, mine.workspace) == \
            (theirs.usage, theirs.run_id, theirs.agent, theirs.model, theirs.outcome, theirs.workspace)
        assert not mine.warnings
    # Where the agent worked, as the transcript writes it and as the request tells it (no repository there).
    assert by_step[0].workspace is not None and by_step[0].workspace.cwd == str(tmp_path / "work")
    assert by_step[0].workspace.git_branch == ""
    assert any(i.kind == "tool_result" for i in by_step[1].items)
    assert any(i.kind == "tools" for i in by_step[0].items) and any(i.kind == "system" for i in by_step[0].items)
    [compaction] = by_step[4].compactions
    assert (compaction.strategy, compaction.trigger) == ("client_summary", "manual")

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    argv = ["import", "--claude-code", str(projects), "--host", live_server.url, "--api-key", key]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=1 calls=5 ")
    run_id = by_step[0].run_id
    calls = _get(live_server, key, f"/api/v1/runs/{run_id}/calls")["results"]
    assert sorted(c["step"] for c in calls) == [0, 1, 2, 3, 4]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh-state"))  # rebuilt and sent again: duplicates
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=1 calls=5 ")
    assert len(_get(live_server, key, f"/api/v1/runs/{run_id}/calls")["results"]) == 5
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # its own state: nothing read again
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("sessions=0 calls=0 ")
