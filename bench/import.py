"""What ``ctxkit import`` costs per MB of transcript, against reading the same files with
``json.loads`` per line.

    .venv/bin/python bench/import.py [--sessions 120] [--turns 60] [--rounds 3] [--profile]

Generates Claude Code transcripts as version 2.1.332 writes them (a real session's system prompt
and tool definitions in an ``api-request-shape`` line, then per call: the user line with a tool
result of 0.5-4 KB in numbered lines as Read gives them, an attachment line, an ``api-request``
line naming its messages by hash after the ``keep`` of the call before, and the answer in one
assistant line per content block; a text prompt every tenth call and a reminder blob on the
first), many sessions in a temporary folder. Then, in alternating rounds on the same files: the
baseline (each line through ``json.loads``), the reader alone (each call's request rebuilt, none
mapped) and the import (``import_transcripts`` into a sink that only counts: no server, so the
figure is the importer's own work, the reader and the proxy's mapping ``Capture.build`` of each
call). Prints MB/s and calls/s of each (wall clock and this process's CPU time, the best of the
rounds), the ratios to the baseline (goal >= 0.3x) and the load average; then the size of the
manifests an import sends and what encoding them alone costs, against the same baseline. ``--profile`` prints
the import's top functions by own time.
Not a test: figures vary with the machine; compare the ratio within one run.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "sdk"))

from ctxkit.importer.sessions import SOURCES, Source, import_transcripts  # noqa: E402

DEMO = ROOT / "manifests" / "demo" / "transcripts" / "claude-code"
WORDS = ("the refund rate parcel order customer invoice finance desk approved pending shipped returned "
         "warehouse label carrier status update note file function return value test case").split()


def _hash(message: dict[str, Any]) -> str:
    text = json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


def _file(rng: random.Random, size: int) -> str:
    """A tool result as Claude Code's Read gives one: numbered lines of 20-90 characters."""
    lines: list[str] = []
    length = 0
    while length < size:
        line = f"{len(lines) + 1:>6}\t{_text(rng, rng.randint(20, 90))}"
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)


def _shape() -> dict[str, Any]:
    """The system prompt and tools of the demo's real session (Claude Code 2.1.332)."""
    for path in DEMO.rglob("*.jsonl"):
        for raw in path.read_text(encoding="utf-8").splitlines():
            line = json.loads(raw)
            if line.get("type") == "api-request-shape":
                return dict(line["shape"])
    raise SystemExit(f"no api-request-shape line under {DEMO}")


def write_session(path: Path, number: int, turns: int, shape: dict[str, Any]) -> int:
    """One session of ``turns`` calls; the number of calls written."""
    rng = random.Random(number)
    session = f"00000000-0000-4000-8000-{number:012d}"
    common = {"sessionId": session, "version": "2.1.332", "cwd": f"/src/app{number % 7}", "gitBranch": "main",
              "userType": "external", "entrypoint": "cli"}
    stamp = 1_796_000_000 + number * 3_600
    lines: list[dict[str, Any]] = []

    def line(kind: str, **fields: Any) -> None:
        moment = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(stamp + len(lines)))
        lines.append({"type": kind, **common, "timestamp": moment, "uuid": f"{session}-{len(lines)}", **fields})

    shape_hash = hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()
    line("api-request-shape", shapeHash=shape_hash, shape=shape)
    sent: list[dict[str, Any]] = []  # the messages of the last request
    previous: dict[str, Any] | None = None  # the last answer, as the reader remembers it
    tool_id = ""
    for turn in range(turns):
        tail: list[str] = []
        if turn == 0 or turn % 10 == 0 or not tool_id:
            question = {"role": "user", "content": f"please {_text(rng, rng.randint(40, 400))}"}
        else:
            result = _file(rng, rng.randint(500, 4_000))
            question = {"role": "user", "content": [{"tool_use_id": tool_id, "type": "tool_result",
                                                     "content": result}]}
        line("user", message=question, isSidechain=False, promptId=f"p{turn}")
        line("attachment", isSidechain=False, attachment={"type": "todo", "content": _text(rng, 1_500)})
        if previous is not None:
            tail.append(_hash(previous))
        if turn == 0:
            reminder = {"role": "user", "content": [{"type": "text", "text": "<system-reminder>"
                                                     + _text(rng, 2_000) + "</system-reminder>"}]}
            line("api-request-blob", hash=_hash(reminder), message=reminder)
            tail.append(_hash(reminder))
        tail.append(_hash(question))
        messages = [*sent, *([previous] if previous is not None else []), *([reminder] if turn == 0 else []),
                    question]
        last = len(messages) - 1
        line("api-request", id=f"{session}-r{turn}", shapeHash=shape_hash, keep=len(sent),
             tail=tail, params={"model": "claude-opus-5-5", "max_tokens": 128000, "betas": ["claude-code-20250219"],
                                "thinking": {"type": "adaptive"}},
             cacheControl=[{"path": ["system", 2], "value": {"type": "ephemeral"}},
                           {"path": ["messages", last], "value": {"type": "ephemeral"}}])
        sent = messages
        blocks: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            blocks.append({"type": "text", "text": _text(rng, rng.randint(50, 600))})
        tool_id = f"toolu_{number}_{turn}" if turn % 10 != 9 else ""
        if tool_id:
            blocks.append({"type": "tool_use", "id": tool_id, "name": rng.choice(["Read", "Bash", "Grep"]),
                           "input": {"file_path": f"/src/app/{rng.choice(WORDS)}.py"}})
        else:
            blocks.append({"type": "text", "text": _text(rng, 300)})
        usage = {"input_tokens": 300 + 40 * turn, "cache_creation_input_tokens": 700,
                 "cache_read_input_tokens": 9_000 + 900 * turn, "output_tokens": 20 + rng.randint(0, 400)}
        for index, block in enumerate(blocks):  # one line per content block, the stop reason on the last
            done = index == len(blocks) - 1
            line("assistant", isSidechain=False, requestRef=f"{session}-r{turn}", message={
                "id": f"msg_{number}_{turn}", "type": "message", "role": "assistant", "model": "claude-opus-5-5",
                "content": [block], "stop_reason": ("tool_use" if tool_id else "end_turn") if done else None,
                "stop_sequence": None, "usage": usage})
        previous = {"role": "assistant", "content": blocks}
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(item) + "\n" for item in lines)
    return turns


class Count:
    """A sink that counts."""

    def __init__(self) -> None:
        self.calls = 0

    def capture(self, _manifest: object) -> None:
        self.calls += 1


class Encode:
    """A sink that encodes each manifest as the client does before sending it, and times only that."""

    def __init__(self) -> None:
        self.encoder = msgspec.json.Encoder()
        self.bytes = 0
        self.cpu = 0.0

    def capture(self, manifest: object) -> None:
        started = time.process_time()
        self.bytes += len(self.encoder.encode(manifest))
        self.cpu += time.process_time() - started


def read_only(source: Source, files: list[str]) -> int:
    """The reader alone: each file's calls rebuilt, none mapped."""
    return sum(1 for path in files for _call in source.calls(path, 0, []))


def baseline(files: list[str]) -> int:
    lines = 0
    for path in files:
        with open(path, "rb") as handle:
            for raw in handle:
                json.loads(raw)
                lines += 1
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=120)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ctxkit-import-bench-") as folder:
        projects = Path(folder) / "projects"
        shape = _shape()
        calls = 0
        for number in range(args.sessions):
            project = projects / f"-src-app{number % 7}"
            project.mkdir(parents=True, exist_ok=True)
            calls += write_session(project / f"session-{number}.jsonl", number, args.turns, shape)
        source = SOURCES["claude-code"]
        files = source.files(str(projects), "")
        size = sum(os.path.getsize(p) for p in files)
        print(f"{len(files)} sessions, {calls:,} calls, {baseline(files):,} lines, {size / 1e6:.1f} MB")
        read_times: list[tuple[float, float]] = []  # (wall, CPU) seconds
        import_times: list[tuple[float, float]] = []
        reader_times: list[tuple[float, float]] = []
        for _round in range(args.rounds):
            wall, cpu = time.perf_counter(), time.process_time()
            baseline(files)
            read_times.append((time.perf_counter() - wall, time.process_time() - cpu))
            wall, cpu = time.perf_counter(), time.process_time()
            assert read_only(source, files) == calls
            reader_times.append((time.perf_counter() - wall, time.process_time() - cpu))
            sink = Count()
            wall, cpu = time.perf_counter(), time.process_time()
            summary = import_transcripts(source, str(projects), sink)
            import_times.append((time.perf_counter() - wall, time.process_time() - cpu))
            assert sink.calls == calls == summary.calls, (sink.calls, calls, summary.calls)
        for name, times in (("json.loads per line", read_times), ("the reader alone", reader_times),
                            ("ctxkit import", import_times)):
            wall, cpu = min(t[0] for t in times), min(t[1] for t in times)
            print(f"{name:20} {size / 1e6 / wall:7.2f} MB/s {calls / wall:9,.0f} calls/s wall; "
                  f"{size / 1e6 / cpu:7.2f} MB/s {calls / cpu:9,.0f} calls/s CPU "
                  f"(rounds, wall: {', '.join(f'{t[0]:.2f}' for t in times)} s)")
        read = (min(t[0] for t in read_times), min(t[1] for t in read_times))
        reader = (min(t[0] for t in reader_times), min(t[1] for t in reader_times))
        imported = (min(t[0] for t in import_times), min(t[1] for t in import_times))
        print(f"ratio import / json.loads: {read[0] / imported[0]:.4f}x wall, {read[1] / imported[1]:.4f}x CPU "
              f"(goal >= 0.3x); the reader alone {read[1] / reader[1]:.3f}x CPU; "
              f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        encoded = Encode()
        import_transcripts(source, str(projects), encoded)
        print(f"the manifests sent: {encoded.bytes / 1e6:.1f} MB ({encoded.bytes / size:.1f}x the files); encoding "
              f"them alone (msgspec, as the client does) {read[1] / encoded.cpu:.3f}x json.loads CPU")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            import_transcripts(source, str(projects), Count())
            profile.disable()
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
