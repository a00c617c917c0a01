"""``ctxkit import`` run again after an agent wrote more files: what was imported before is not sent
again, and still places what comes after it (the demo's real Claude Code session and sub-agent)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import msgspec

from ctxkit.importer.sessions import SOURCES, import_transcripts, save_state

SESSION = Path(__file__).resolve().parents[2] / "manifests" / "demo" / "transcripts" / "claude-code"


class Kept:
    def __init__(self) -> None:
        self.manifests: list[dict[str, Any]] = []

    def capture(self, manifest: Any) -> None:
        self.manifests.append(msgspec.to_builtins(manifest))


def test_it_makes_a_sub_agent_file_written_after_its_session_was_imported_a_child_run(tmp_path: Path) -> None:
    source = SOURCES["claude-code"]
    whole = Kept()
    import_transcripts(source, str(SESSION), whole)
    children = [m for m in whole.manifests if m.get("parent_run_id")]
    assert children, "the demo session has a sub-agent"

    folder = tmp_path / "projects"
    shutil.copytree(SESSION, folder)
    [subagents] = folder.rglob("subagents")
    held = tmp_path / "held"
    shutil.move(subagents, held)
    state = str(tmp_path / "state.json")
    first = Kept()
    import_transcripts(source, str(folder), first, state_path=state)
    assert len(first.manifests) == len(whole.manifests) - len(children)
    [main] = folder.rglob("*.jsonl")
    save_state(state, {str(main): main.stat().st_size})  # read to its end, as when its last line ends a call

    shutil.move(held, subagents)  # the agent writes its sub-agent's file later
    later = Kept()
    summary = import_transcripts(source, str(folder), later, state_path=state)
    assert later.manifests == children  # only the sub-agent's calls, in their child run
    assert summary.skipped == 1 and summary.calls == len(children)
