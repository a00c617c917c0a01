"""ctxkit.record.spool.Spool: crash-tolerant, multi-process, bounded JSONL segments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgspec

from conftest import make_manifest
from ctxkit.manifest import decode_manifest
from ctxkit.record.spool import Spool

SDK_DIR = str(Path(__file__).resolve().parents[1])


def call_ids(lines: list[bytes]) -> list[str]:
    return [json.loads(line)["call_id"] for line in lines]


class Recorder:
    """A drain ``send`` that records what it got and answers ``ok``."""

    def __init__(self, ok: bool = True, delay: float = 0.0) -> None:
        self.ok = ok
        self.delay = delay
        self.calls: list[list[bytes]] = []
        self.lock = threading.Lock()

    def __call__(self, lines: list[bytes]) -> bool:
        time.sleep(self.delay)
        with self.lock:
            self.calls.append(list(lines))
        return self.ok

    @property
    def lines(self) -> list[bytes]:
        return [line for call in self.calls for line in call]


def run_child(code: str) -> None:
    """Run ``code`` in a new Python process (it exits before we look at the spool)."""
    subprocess.run([sys.executable, "-c", code], check=True, cwd=SDK_DIR, timeout=60)


def test_it_round_trips_structs_dicts_and_bytes_and_deletes_sent_segments(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    assert spool.append(make_manifest("struct")) == 1
    assert spool.append([msgspec.to_builtins(make_manifest("dict")), msgspec.json.encode(make_manifest("bytes"))]) == 2
    assert spool.has_pending()
    send = Recorder()
    result = spool.drain(send)
    assert (result.sent, result.segments, result.left, result.skipped) == (3, 1, 0, 0)
    assert [decode_manifest(line).call_id for line in send.lines] == ["struct", "dict", "bytes"]
    assert os.listdir(tmp_path) == [] and not spool.has_pending()


def test_pretty_printed_json_becomes_one_line(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(json.dumps(msgspec.to_builtins(make_manifest("pretty")), indent=2).encode())
    send = Recorder()
    spool.drain(send)
    assert call_ids(send.lines) == ["pretty"]


def test_a_refused_or_failing_send_keeps_the_segment(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([make_manifest("a"), make_manifest("b")])
    result = spool.drain(Recorder(ok=False))
    assert (result.sent, result.left) == (0, 1)

    def explode(lines: list[bytes]) -> bool:
        raise ConnectionError("down")

    assert spool.drain(explode).left == 1
    assert [n.endswith(".jsonl") for n in os.listdir(tmp_path)] == [True]  # claim given back
    send = Recorder()
    assert spool.drain(send).sent == 2
    assert call_ids(send.lines) == ["a", "b"]


def test_a_crash_loses_at_most_the_partial_last_line(tmp_path: Path) -> None:
    # The child appends, starts a line it never finishes, and dies without closing.
    run_child(
        "import os, sys\n"
        "from ctxkit.record.spool import Spool\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_spool import make_manifest\n"
        f"s = Spool({str(tmp_path)!r})\n"
        "s.append([make_manifest('c0'), make_manifest('c1')])\n"
        "s.append(make_manifest('c2'))\n"
        "os.write(s._fd, b'{\"schema\": \"ctxview.manifest/v1\", \"call_id\": \"cut')\n"
        "os._exit(0)\n"
    )
    assert [n.endswith(".part") for n in os.listdir(tmp_path)] == [True]  # never sealed
    send = Recorder()
    result = Spool(tmp_path).drain(send)  # the writer is dead: its segment is adopted
    assert call_ids(send.lines) == ["c0", "c1", "c2"]
    assert result.skipped == 1
    assert os.listdir(tmp_path) == []


def test_a_corrupt_line_is_skipped_not_sent(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([make_manifest("a"), b"garbage {", b"[1, 2]", make_manifest("b")])
    send = Recorder()
    result = spool.drain(send)
    assert call_ids(send.lines) == ["a", "b"] and result.skipped == 2


def test_several_processes_write_their_own_segments(tmp_path: Path) -> None:
    code = (
        "import os\n"
        "from datetime import UTC, datetime\n"
        "from ctxkit.manifest import Budget, Manifest\n"
        "from ctxkit.record.spool import Spool\n"
        f"s = Spool({str(tmp_path)!r})\n"
        "for batch in range(5):\n"
        "    s.append([Manifest(schema='ctxview.manifest/v1', call_id=f'{os.getpid()}-{batch}-{n}', run_id='r',\n"
        "        step=0, model='m', started_at=datetime.now(UTC), budget=Budget(window=10)) for n in range(10)])\n"
        "s.close()\n"
    )
    children = [subprocess.Popen([sys.executable, "-c", code], cwd=SDK_DIR) for _ in range(4)]
    assert all(child.wait(60) == 0 for child in children)
    writers = {name.split("-")[1] for name in os.listdir(tmp_path)}
    assert writers == {str(child.pid) for child in children}
    send = Recorder()
    assert Spool(tmp_path).drain(send).sent == 200
    ids = call_ids(send.lines)
    assert len(ids) == len(set(ids)) == 200


def test_the_spool_stays_within_its_bound_dropping_the_oldest(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=20_000, segment_bytes=4_000)
    line = len(msgspec.json.encode(make_manifest("c000"))) + 1
    for n in range(200):
        spool.append(make_manifest(f"c{n:03d}"))
        size = sum(p.stat().st_size for p in tmp_path.iterdir())
        assert size <= 20_000
    assert spool.dropped > 0
    send = Recorder()
    spool.drain(send)
    ids = call_ids(send.lines)
    assert len(ids) + spool.dropped == 200
    assert ids == [f"c{n:03d}" for n in range(200 - len(ids), 200)]  # the newest survive, in order
    assert len(ids) * line > 10_000  # the bound is used, not emptied


def test_concurrent_drainers_never_send_a_segment_twice(tmp_path: Path) -> None:
    writer = Spool(tmp_path, segment_bytes=1)  # every append starts a new segment
    for n in range(20):
        writer.append([make_manifest(f"c{n}-{k}") for k in range(10)])
    writer.close()
    assert len(os.listdir(tmp_path)) == 20
    sends = [Recorder(delay=0.01), Recorder(delay=0.01)]
    threads = [threading.Thread(target=Spool(tmp_path).drain, args=(send,)) for send in sends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    ids = call_ids(sends[0].lines + sends[1].lines)
    assert len(ids) == len(set(ids)) == 200
    assert sends[0].calls and sends[1].calls  # both took part
    assert os.listdir(tmp_path) == []


def test_a_segment_open_in_this_process_is_not_taken_by_another_spool(tmp_path: Path) -> None:
    writer = Spool(tmp_path)
    writer.append(make_manifest("mine"))
    other = Recorder()
    Spool(tmp_path).drain(other)
    assert other.calls == []
    writer.append(make_manifest("mine-too"))  # still writable: nobody took the file away
    own = Recorder()
    writer.drain(own)
    assert call_ids(own.lines) == ["mine", "mine-too"]


def test_stale_or_abandoned_files_are_adopted(tmp_path: Path) -> None:
    line = msgspec.json.encode(make_manifest("x")) + b"\n"
    live_pid = os.getppid()  # a process that is certainly alive and is not us
    fresh = tmp_path / f"{time.time_ns():020d}-{live_pid}-aaaa.part"
    fresh.write_bytes(line.replace(b'"x"', b'"fresh"'))
    stale = tmp_path / f"{time.time_ns() - 10**12:020d}-{live_pid}-bbbb.part"
    stale.write_bytes(line.replace(b'"x"', b'"stale"'))
    old = time.time() - 3600
    os.utime(stale, (old, old))
    claimed = tmp_path / f"{time.time_ns():020d}-{live_pid}-cccc.jsonl.999999999.sending"
    claimed.write_bytes(line.replace(b'"x"', b'"claimed-by-dead"'))
    send = Recorder()
    Spool(tmp_path, stale_after=600).drain(send)
    assert sorted(call_ids(send.lines)) == ["claimed-by-dead", "stale"]
    assert fresh.exists()  # a live writer may still append to it


def test_after_fork_the_child_writes_its_own_segment(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(make_manifest("parent"))
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            spool.append(make_manifest("child"))
            spool.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    names = sorted(os.listdir(tmp_path))
    assert len(names) == 2 and {n.split("-")[1] for n in names} == {str(os.getpid()), str(pid)}
    spool.append(make_manifest("parent-2"))  # the parent's segment is untouched by the child
    send = Recorder()
    spool.drain(send)
    assert sorted(call_ids(send.lines)) == ["child", "parent", "parent-2"]
