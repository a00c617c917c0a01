"""The one background worker that recording goes through: ``ctxkit.instrument()``'s recorder and
the proxy's capture both hand it what they saw and let it build manifests off the caller's path.

The buffer is a deque (an append is atomic and costs a fraction of a queue.Queue put, which
takes a lock and notifies); one daemon thread drains it and sleeps ``POLL`` seconds when it is
empty, so an entry is handled at most that much later. A full buffer drops the entry (counted in
``stats["dropped"]``); ``submit`` never blocks and never raises. After a fork the parent's thread
does not exist in the child: the child starts its own, with an empty buffer.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Background"]

T = TypeVar("T")


class Background(Generic[T]):
    """Calls ``handle(entry)`` for each submitted entry, in order, on one daemon thread named
    ``name``; ``handle`` counts its own outcomes in ``stats`` and must not raise."""

    POLL = 0.05

    def __init__(self, handle: Callable[[T], None], *, name: str, max_queue: int, stats: dict[str, int]) -> None:
        self.handle = handle
        self.name = name
        self.max_queue = max_queue
        self.stats = stats
        self.stats.setdefault("dropped", 0)
        self.buffer: collections.deque[T] = collections.deque()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._wake = threading.Event()
        self._busy = False
        self._pid = os.getpid()

    def submit(self, entry: T) -> None:
        """Queue one entry; never blocks, never raises (a full buffer drops it, counted)."""
        try:
            if self._pid != os.getpid():  # forked: the parent's thread does not exist here
                self._pid, self._thread, self.buffer = os.getpid(), None, collections.deque()
            if len(self.buffer) >= self.max_queue:
                self.stats["dropped"] += 1
                return
            self.buffer.append(entry)
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._start()
        except Exception:
            self.stats["dropped"] += 1

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()

    def _work(self) -> None:
        buffer = self.buffer
        while True:
            try:
                self._busy = True
                entry = buffer.popleft()
            except IndexError:
                self._busy = False
                self._wake.wait(self.POLL)
                self._wake.clear()
                if buffer is not self.buffer:
                    return  # replaced after a fork
                continue
            self.handle(entry)

    def drain(self, deadline: float) -> bool:
        """Wait until every submitted entry is handled, or ``time.monotonic()`` passes ``deadline``
        (False then)."""
        while (self.buffer or self._busy) and self._thread is not None and self._thread.is_alive():
            if time.monotonic() > deadline:
                return False
            self._wake.set()
            time.sleep(0.005)
        return True
