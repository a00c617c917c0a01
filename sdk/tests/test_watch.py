"""``ctxkit watch``'s watcher in process: a file whose reader it let go (idle) is read again when it
grows, and only its new calls are mapped and sent, in their run's next steps; while ctxview does
not answer, calls wait in the client's spool and reach it when it answers again, none lost."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from conftest import API_KEY, IngestServer
from ctxkit.importer.sessions import SOURCES
from ctxkit.importer.watch import Watcher
from ctxkit.record.client import Client


def _hash(message: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(message, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _turn(n: int) -> str:
    """Call ``n`` of one session (Claude Code 2.1.332 lines: its request, then its answer)."""
    def line(kind: str, **fields: object) -> str:
        return json.dumps({"type": kind, "sessionId": "w1", "version": "2.1.332",
                           "timestamp": "2026-12-01T10:00:00.000Z", **fields}) + "\n"
    question = {"role": "user", "content": f"step {n}"}
    tail = [_hash(question)] if n == 0 else [_hash({"role": "assistant", "content": [
        {"type": "text", "text": f"answer {n - 1}"}]}), _hash(question)]
    text = line("user", message=question)
    if n == 0:
        text += line("api-request-shape", shapeHash="s", shape={"system": [{"type": "text", "text": "Be brief."}]})
    text += line("api-request", id=f"r{n}", shapeHash="s", keep=max(0, 2 * n - 1), tail=tail,
                 params={"model": "claude-sonnet-4-5", "max_tokens": 100})
    return text + line("assistant", message={
        "id": f"msg_w_{n}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": f"answer {n}"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 10 + n, "output_tokens": 3}})


class Kept:
    def __init__(self) -> None:
        self.manifests: list[Any] = []

    def capture(self, manifest: Any) -> None:
        self.manifests.append(manifest)


def test_it_maps_only_new_calls_of_a_file_read_again_after_its_reader_went_idle(tmp_path: Path) -> None:
    folder = tmp_path / "projects" / "-src"
    folder.mkdir(parents=True)
    transcript = folder / "w1.jsonl"
    transcript.write_text(_turn(0) + _turn(1), encoding="utf-8")
    kept = Kept()
    watcher = Watcher([(SOURCES["claude-code"], str(tmp_path / "projects"))], kept,
                      state_path=str(tmp_path / "state.json"), idle=0.0)
    assert watcher.poll() == 2
    assert watcher.files[str(transcript)].reader is None  # idle at once: its tables let go
    assert watcher.poll() == 0
    with open(transcript, "a", encoding="utf-8") as handle:
        handle.write(_turn(2))
    assert watcher.poll() == 1
    assert [(m.run_id, m.step) for m in kept.manifests] == [("session-w1", 0), ("session-w1", 1),
                                                            ("session-w1", 2)]
    assert all(not m.warnings for m in kept.manifests)  # each request rebuilt whole
    assert json.loads((tmp_path / "state.json").read_text()) == {str(transcript): transcript.stat().st_size}


def test_it_spools_while_ctxview_is_down_and_loses_nothing(tmp_path: Path, server: IngestServer) -> None:
    folder = tmp_path / "projects" / "-src"
    folder.mkdir(parents=True)
    transcript = folder / "w1.jsonl"
    transcript.write_text(_turn(0) + _turn(1), encoding="utf-8")
    server.stop()
    client = Client(API_KEY, server.url, spool_dir=str(tmp_path / "spool"), probe_interval=0.2, timeout=2.0)
    try:
        watcher = Watcher([(SOURCES["claude-code"], str(tmp_path / "projects"))], client,
                          state_path=str(tmp_path / "state.json"))
        assert watcher.poll() == 2
        with open(transcript, "a", encoding="utf-8") as handle:
            handle.write(_turn(2))
        assert watcher.poll() == 1
        assert client.stats()["spooled"] == 3 and server.ids() == set()
        assert json.loads((tmp_path / "state.json").read_text()) == {str(transcript): transcript.stat().st_size}
        server.start()  # the same port
        assert server.wait_for(3, timeout=5.0)
        assert len(server.ids()) == 3 and server.duplicates == 0
    finally:
        client.shutdown(timeout=2.0)
