"""``ctxkit import`` sends where each call's agent worked: the ``cwd`` and ``gitBranch`` Claude Code
writes on its transcript lines become the manifest's workspace (against a real local server)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import API_KEY, IngestServer
from ctxkit.cli import main


def _answer(message_id: str) -> dict:
    return {"id": message_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 30, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                      "output_tokens": 2}}


def _session(folder: Path, session: str, **where: str) -> None:
    """A two-call session whose lines carry ``where`` (cwd, gitBranch) as Claude Code writes them."""
    lines = []
    for n in range(2):
        for kind, message in (("user", {"role": "user", "content": f"question {n}"}),
                              ("assistant", _answer(f"msg_{session}_{n}"))):
            lines.append(json.dumps({"type": kind, "sessionId": session, "version": "2.1.332",
                                     "timestamp": f"2026-12-01T10:00:0{n}.000Z", "message": message, **where}))
    (folder / f"{session}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_it_sends_the_transcripts_folder_and_branch_with_each_call(tmp_path: Path, server: IngestServer,
                                                                   monkeypatch, capsys) -> None:
    folder = tmp_path / "projects" / "-home-dev-src-app"
    folder.mkdir(parents=True)
    _session(folder, "in-repo", cwd="/home/dev/src/app", gitBranch="feat/refunds")
    _session(folder, "no-repo", cwd="/tmp/scratch", gitBranch="HEAD")  # what Claude Code writes outside a repo
    _session(folder, "untold")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert main(["import", "--claude-code", str(tmp_path / "projects"), "--host", server.url,
                 "--api-key", API_KEY]) == 0
    assert capsys.readouterr().out.startswith("sessions=3 calls=6 ")
    by_run: dict[str, set[str]] = {}
    for manifest in server.stored.values():
        place = manifest.get("workspace")
        by_run.setdefault(manifest["run_id"], set()).add(json.dumps(place, sort_keys=True))
    assert sorted(by_run.values(), key=sorted) == sorted([
        {json.dumps({"cwd": "/home/dev/src/app", "git_branch": "feat/refunds"}, sort_keys=True)},
        {json.dumps({"cwd": "/tmp/scratch"}, sort_keys=True)},
        {"null"},
    ], key=sorted)
