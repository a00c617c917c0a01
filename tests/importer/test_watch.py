"""``ctxkit watch`` as a process (``python -m ctxkit.cli watch``) against the live server: lines
appended to a Claude Code transcript (written as Claude Code 2.1.332 writes them: the request's
shape, messages and ``api-request`` lines, then the answer) show as calls through the API within
2 seconds; a watcher killed (SIGKILL) and started again loses and duplicates nothing; a file
rotated (cut and written again, or replaced) is read again from its start. And for every agent,
the demo's transcripts (recorded with the real CLIs) written line by line under a watcher give
the manifests an import of the whole files gives."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxkit.importer.sessions import SOURCES, import_transcripts
from ctxkit.importer.watch import Watcher

DEADLINE = 2.0  # seconds from a line written to its call through the API
DEMO = Path(__file__).resolve().parents[2] / "manifests" / "demo" / "transcripts"
SYSTEM = [{"type": "text", "text": "You are a careful coding agent."}]
TOOLS = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {}}}]


def _hash(message: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(message, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Session:
    """A Claude Code session's transcript lines, turn by turn."""

    def __init__(self, session: str) -> None:
        self.session = session
        self.turns = 0
        self.last_answer: dict[str, Any] | None = None

    def _line(self, kind: str, **fields: object) -> str:
        return json.dumps({"sessionId": self.session, "type": kind, "version": "2.1.332", "cwd": "/src/app",
                           "gitBranch": "main", "timestamp": "2026-12-01T10:00:00.000Z", **fields}) + "\n"

    def turn(self) -> tuple[str, str]:
        """One call: (the lines up to its request, its answer's line)."""
        n, self.turns = self.turns, self.turns + 1
        question = {"role": "user", "content": f"step {n} of {self.session}"}
        lines = self._line("user", message=question, isSidechain=False, uuid=f"u{n}")
        if n == 0:
            lines += self._line("api-request-shape", shapeHash="s1", shape={"system": SYSTEM, "tools": TOOLS})
        tail = [_hash(question)] if self.last_answer is None else [_hash(self.last_answer), _hash(question)]
        lines += self._line("api-request", id=f"{self.session}-r{n}", shapeHash="s1", keep=max(0, 2 * n - 1),
                            tail=tail, params={"model": "claude-sonnet-4-5", "max_tokens": 1000})
        text = f"answer {n} of {self.session}"
        self.last_answer = {"role": "assistant", "content": [{"type": "text", "text": text}]}
        answer = {"id": f"msg_{self.session}_{n}", "type": "message", "role": "assistant",
                  "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": text}],
                  "stop_reason": "end_turn", "usage": {"input_tokens": 40 + 30 * n, "cache_creation_input_tokens": 0,
                                                       "cache_read_input_tokens": 0, "output_tokens": 7}}
        return lines, self._line("assistant", message=answer, isSidechain=False, uuid=f"a{n}")


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(text)


def _calls(url: str, key: str) -> list[tuple[str, int]]:
    """(run id, step) of every call the API lists."""
    def get(path: str) -> Any:
        request = urllib.request.Request(f"{url}{path}", headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    return sorted((run["run_id"], call["step"]) for run in get("/api/v1/runs?limit=100")["results"]
                  for call in get(f"/api/v1/runs/{run['run_id']}/calls")["results"])


def _until(check: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``check()`` holds, polled; fails after ``timeout``."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "not within the deadline"
        time.sleep(0.05)
    return time.monotonic() - started


@pytest.fixture
def watcher(live_server, key, tmp_path: Path) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """Starts ``ctxkit watch`` over tmp_path/projects (state and spool under tmp_path/state)."""
    started: list[subprocess.Popen[str]] = []
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "CTXVIEW_HOST": live_server.url,
           "CTXVIEW_API_KEY": key}

    def start() -> subprocess.Popen[str]:
        process = subprocess.Popen([sys.executable, "-m", "ctxkit.cli", "watch", "--claude-code",
                                    str(tmp_path / "projects")], env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert process.stdout is not None and process.stdout.readline().startswith("watching ")
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)


@pytest.mark.django_db(transaction=True)
def test_it_sends_appended_calls_within_two_seconds_and_survives_kill_and_rotation(live_server, key, watcher,
                                                                                  tmp_path: Path) -> None:
    folder = tmp_path / "projects" / "-src-app"
    folder.mkdir(parents=True)
    transcript = folder / "s1.jsonl"
    one = Session("s1")
    lines, answer = one.turn()
    transcript.write_text(lines + answer, encoding="utf-8")
    process = watcher()
    _until(lambda: _calls(live_server.url, key) == [("session-s1", 0)], 15.0)

    lines, answer = one.turn()  # the request, then its answer a little later
    _append(transcript, lines)
    time.sleep(0.3)
    _append(transcript, answer)
    assert _until(lambda: len(_calls(live_server.url, key)) == 2, DEADLINE) < DEADLINE

    lines, answer = one.turn()  # killed with a request half answered; more written while it is down
    _append(transcript, lines)
    time.sleep(0.6)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    _append(transcript, answer + "".join(one.turn()))
    process = watcher()
    _until(lambda: len(_calls(live_server.url, key)) >= 4, 15.0)
    time.sleep(1.0)  # a round more: nothing sent twice
    assert _calls(live_server.url, key) == [("session-s1", step) for step in range(4)]

    os.truncate(transcript, 0)  # cut and written again (copytruncate): a new session in the same file
    two = Session("s2")
    _append(transcript, "".join(two.turn()) + "".join(two.turn()))
    assert _until(lambda: len(_calls(live_server.url, key)) == 6, DEADLINE) < DEADLINE

    transcript.rename(folder / "s1.jsonl.1")  # replaced: a new file of the same name
    three = Session("s3")
    (folder / "s1.jsonl").write_text("".join(three.turn()), encoding="utf-8")
    assert _until(lambda: len(_calls(live_server.url, key)) == 7, DEADLINE) < DEADLINE
    time.sleep(1.0)
    assert _calls(live_server.url, key) == [*(("session-s1", step) for step in range(4)), ("session-s2", 0),
                                            ("session-s2", 1), ("session-s3", 0)]

    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=20)
    assert process.returncode == 0
    assert out.splitlines()[-1] == "calls=5 rejected=0 spooled=0", out


class Kept:
    def __init__(self) -> None:
        self.manifests: list[Any] = []

    def capture(self, manifest: Any) -> None:
        self.manifests.append(msgspec.to_builtins(manifest))


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini"])
def test_it_maps_a_transcript_written_line_by_line_as_an_import_of_it(agent: str, tmp_path: Path) -> None:
    source, folder = SOURCES[agent], DEMO / agent
    imported = Kept()
    import_transcripts(source, str(folder), imported)
    assert imported.manifests
    for marker in folder.rglob(".project_root"):  # Gemini CLI names a project's folder in it
        (tmp_path / marker.relative_to(folder)).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / marker.relative_to(folder)).write_bytes(marker.read_bytes())
    watched = Kept()
    watcher = Watcher([(source, str(tmp_path))], watched, settle=0.3)
    for path in source.files(str(folder), ""):
        copy = tmp_path / Path(path).relative_to(folder)
        copy.parent.mkdir(parents=True, exist_ok=True)
        with open(path, encoding="utf-8") as lines, open(copy, "a", encoding="utf-8") as handle:
            for line in lines:
                handle.write(line)
                handle.flush()
                watcher.poll()
    time.sleep(0.4)  # quiet: the answer that ends a file goes too
    watcher.poll()
    assert watched.manifests == imported.manifests
