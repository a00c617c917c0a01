"""``ctxkit watch``: the folders ``ctxkit import`` reads, followed; each new call is sent as its
lines are written.

Every ``interval`` seconds the watcher lists each source's transcripts and looks at their size
and inode (polling: portable, no file-system events). A file that grew is read from where its
reader stopped: each agent module's reader (``Source.reader``) parses each line once while the
watcher runs. A call whose answer ends the file is sent once the answer is whole
(it names its stop reason) or the file has been quiet for ``settle`` seconds; each call is
mapped once, by its key, even where its agent writes its answer again, completed.

A reader keeps the tables of its file's earlier lines; once the file was last written more than
``idle`` seconds ago (a session that ended; at start-up, every file written before) they go, and
should the file grow again a new reader parses it from its start, mapping only the calls after
those already mapped.

What was sent is remembered per file as ``ctxkit import`` does (byte offsets, the same state
file), saved after each file's new calls once the client has sent or spooled them: a watcher killed at any point sends
again at most the calls of its last round, which the server stores once (a call's id is stable).
At start-up a file that grew since is read from its start; the calls before its offset are
mapped again (so runs and steps are placed as before) but not sent. A file truncated or
replaced (its inode changed, or it is shorter than what was read) is read again from its start.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TextIO

from ctxkit.agents.transcripts import Reader, TranscriptCall
from ctxkit.importer.sessions import Mapping, Source, load_state, save_state

__all__ = ["Watcher", "run"]


HEAD = 1024  # bytes of a file's start compared to tell a rewritten file from a grown one


def _head(path: str) -> bytes:
    """The file's first line, at most HEAD bytes of it."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD)
    except OSError:
        return b""
    end = head.find(b"\n")
    return head[:end + 1] if end >= 0 else head


def _starts_with(path: str, head: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(head)) == head
    except OSError:
        return False


@dataclass
class _File:
    """One followed transcript."""

    source: Source
    path: str
    inode: int
    sent: int  # byte offset after the last call sent (the saved state)
    seen: int = 0  # byte offset after the last call mapped by this process
    size: int = -1  # at the last look
    changed: float = 0.0  # time.monotonic() of the last change seen
    written: float = 0.0  # its mtime
    head: bytes = b""  # the file's first bytes when its reader started: another head, another file
    reader: Reader | None = None
    waiting: bool = False  # the file ends with an answer that may still grow, not sent yet
    broken: int = -1  # the size at which its reader failed: tried again once the file changes
    keys: set[str] = field(default_factory=set)  # of the calls mapped: an answer written again maps no more
    malformed: list[str] = field(default_factory=list)


class Watcher:
    """Follows the transcripts of ``sources`` ((source, folder) pairs) and sends their new calls to
    ``sink`` (a :class:`~ctxkit.record.client.Client`, or anything with ``capture`` and
    ``flush``)."""

    def __init__(self, sources: list[tuple[Source, str]], sink: Any, *, state_path: str = "", since: float = 0.0,
                 project_dir: str = "", include_text: bool = True, settle: float = 1.0, idle: float = 600.0,
                 out: TextIO | None = None) -> None:
        self.sources = sources
        self.sink = sink
        self.state_path = state_path
        self.since = since
        self.project_dir = project_dir
        self.settle = settle
        self.idle = idle
        self.out = out
        self.mappings = {source.name: Mapping(source, include_text=include_text) for source, _ in sources}
        self.state = load_state(state_path) if state_path else {}
        self.files: dict[str, _File] = {}
        self.sent = 0  # calls sent since the watcher started

    def poll(self) -> int:
        """One look at every followed file; the number of calls sent. After each file that had
        new calls, the state is saved once the sink has them (sent, or spooled while ctxview does
        not answer)."""
        sent = 0
        listed: set[str] = set()
        for source, folder in self.sources:
            for path in source.files(folder, self.project_dir) if os.path.isdir(folder) else []:
                listed.add(path)
                try:
                    new = self._follow(source, path)
                except Exception as exc:  # a shape no reader expected: the other files go on
                    self._say(f"{path}: not read further ({type(exc).__name__}: {exc})")
                    known = self.files.get(path)
                    if known is not None:
                        known.reader, known.broken = None, known.size
                    continue
                if new:
                    flush = getattr(self.sink, "flush", None)
                    if not callable(flush) or flush(timeout=30.0):
                        self._save()
                    sent += new
        clock = time.time()
        for path, known in list(self.files.items()):
            if path not in listed:  # deleted
                del self.files[path]
            elif known.reader is not None and not known.waiting and clock - known.written > self.idle:
                known.reader = None  # a session that ended: its tables go; if it grows, read again
        self.sent += sent
        return sent

    def _follow(self, source: Source, path: str) -> int:
        try:
            stat = os.stat(path)
        except OSError:  # gone between the listing and now
            self.files.pop(path, None)
            return 0
        now = time.monotonic()
        known = self.files.get(path)
        if known is None:
            sent = self.state.get(path, 0)
            if stat.st_size < sent:  # replaced or cut while no watcher ran
                sent = 0
            known = self.files[path] = _File(source, path, stat.st_ino, sent, changed=now)
        elif stat.st_ino != known.inode or stat.st_size < (known.reader.offset if known.reader else known.sent) \
                or known.reader is not None and stat.st_size != known.size and not _starts_with(path, known.head):
            self._say(f"{path}: rotated, read again from its start")
            known = self.files[path] = _File(source, path, stat.st_ino, 0, changed=now)
            if self.state.pop(path, None) is not None:
                self._save()  # a restart reads the new file from its start too
        known.written = stat.st_mtime
        if stat.st_size != known.size:
            known.size, known.changed = stat.st_size, now
        elif known.reader is not None and not (known.waiting and now - known.changed >= self.settle):
            return 0  # nothing new, nothing waiting
        if known.reader is None:
            if stat.st_size <= known.sent or stat.st_mtime < self.since or stat.st_size == known.broken:
                return 0
            known.reader = source.reader(path, known.malformed, known.sent)
            known.head = _head(path)
        sent = 0
        for call, end in known.reader.read():
            sent += self._map(known, call, end)
        last = known.reader.last()
        if last is not None and last[1] > known.seen and (last[2] or now - known.changed >= self.settle):
            sent += self._map(known, last[0], last[1])
        known.waiting = last is not None and last[1] > known.seen
        for problem in known.malformed:
            self._say(f"skipped {problem}")
        known.malformed.clear()
        if sent:
            self._say(f"{path}: {sent} new calls")
        return sent

    def _map(self, known: _File, call: TranscriptCall, end: int) -> int:
        """Map a call (in file order, each once, so runs and steps are placed as when it was
        first sent); send it unless it was sent before or is older than ``since``."""
        if end <= known.seen or call.key in known.keys:
            return 0
        known.seen = end
        known.keys.add(call.key)
        manifest = self.mappings[known.source.name].manifest(call)
        if manifest is None or end <= known.sent or (call.started and call.started < self.since):
            return 0
        self.sink.capture(manifest)
        known.sent = end
        self.state[known.path] = end
        return 1

    def _save(self) -> None:
        if self.state_path:
            save_state(self.state_path, self.state)

    def _say(self, text: str) -> None:
        if self.out is not None:
            print(text, file=self.out, flush=True)

    def run(self, stop: threading.Event, interval: float = 0.5) -> None:
        """Poll until ``stop`` is set."""
        while not stop.is_set():
            started = time.monotonic()
            self.poll()
            stop.wait(max(0.0, interval - (time.monotonic() - started)))


def run(watcher: Watcher, interval: float = 0.5) -> None:
    """Follow until SIGINT or SIGTERM, then end the round in progress."""
    stop = threading.Event()

    def ask_stop(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {number: signal.signal(number, ask_stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        watcher.run(stop, interval)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
