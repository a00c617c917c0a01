"""The proxy command's recorder in a process of its own.

Mapping a call to a manifest is CPU work (parsing a request that can be megabytes, estimating
tokens, hashing lines). On a thread of the proxy's process it would hold the interpreter lock
while the event loop waits to forward the next chunk; in a child process it runs on another
core, at a lower priority (nice 10), and the event loop only hands over the exchange (a pipe
write, done by the queue's own feeder thread). The child holds :class:`~ctxkit.proxy.capture.Capture` and the ctxkit
:class:`~ctxkit.record.client.Client` that sends to ctxview; it ends when the proxy sends it the
end marker (flushing what it has) or when the proxy's process is gone.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
from typing import Any

from ctxkit.proxy.capture import Capture, Exchange

__all__ = ["CaptureProcess"]
logger = logging.getLogger("ctxkit.proxy")


def _size(exchange: Exchange) -> int:
    return len(exchange.request_body) + sum(len(chunk) for chunk in exchange.chunks)


def _serve(exchanges: Any, pending: Any, parent: int, api_key: str, host: str, spool_dir: str | bool | None,
           include_text: bool, agent: str, log_level: int) -> None:
    from ctxkit.record.client import Client

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the proxy, which ends this
    with contextlib.suppress(OSError):
        os.nice(10)  # recording is background work: on a busy machine, forwarding gets the CPU first
    logging.basicConfig(level=log_level, format="%(levelname)s %(name)s: %(message)s")
    client = Client(api_key, host, spool_dir=spool_dir)
    capture = Capture(client, include_text=include_text, agent=agent)
    try:
        while True:
            try:
                exchange = exchanges.get(timeout=1.0)
            except queue.Empty:
                if os.getppid() != parent:  # the proxy died without saying so
                    break
                continue
            if exchange is None:
                break
            with pending.get_lock():
                pending.value -= _size(exchange)
            capture.handle(exchange)
    finally:
        client.shutdown(timeout=5.0)


class CaptureProcess:
    """Capture's ``submit`` for the proxy, with the work done in a child process. What waits for
    the child is bounded in count (``max_queue``) and in bytes (``max_bytes``): past either, an
    exchange is dropped (counted) rather than held in the proxy's memory."""

    def __init__(self, *, api_key: str, host: str, spool_dir: str | bool | None = None, include_text: bool = True,
                 agent: str = "", max_queue: int = 10_000, max_bytes: int = 256 * 1024 * 1024) -> None:
        context = multiprocessing.get_context("spawn")
        self.max_bytes = max_bytes
        self._exchanges = context.Queue(maxsize=max_queue)
        self._pending = context.Value("q", 0)  # bytes submitted and not yet taken by the child
        self._process = context.Process(
            target=_serve, name="ctxkit-proxy-capture", daemon=True,
            args=(self._exchanges, self._pending, os.getpid(), api_key, host, spool_dir, include_text, agent,
                  logging.getLogger().level))
        self._process.start()
        self.stats = {"dropped": 0}

    def submit(self, exchange: Exchange) -> None:
        """Queue one exchange for the child; never blocks, never raises (a full queue drops it)."""
        try:
            size = _size(exchange)
            with self._pending.get_lock():
                if self._pending.value + size > self.max_bytes:
                    self.stats["dropped"] += 1
                    return
                self._pending.value += size
            try:
                self._exchanges.put_nowait(exchange)
            except Exception:
                with self._pending.get_lock():
                    self._pending.value -= size
                raise
        except Exception:
            self.stats["dropped"] += 1

    def close(self, timeout: float = 10.0) -> bool:
        """Send the end marker and wait for the child to map and send what it has."""
        with contextlib.suppress(Exception):
            self._exchanges.put(None, timeout=timeout)
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.terminate()
            return False
        return True
