"""Send manifests to a ctxview server from a background thread.

``capture()`` only counts the manifest and puts the object on a bounded queue;
encoding, batching (by count, bytes and interval), gzip and HTTP happen on one
daemon worker thread, started lazily and again after ``fork()``. Transient
failures (network errors, 5xx, 408, 429) are retried with capped exponential
backoff and full jitter, ``Retry-After`` taken as a minimum. Other 4xx answers
are final: counted as rejected and logged once. The exception is 401/403 with a
spool configured: a wrong key is not the data's fault, so those manifests are
spooled and sent once the key is fixed. Whatever cannot be queued or sent goes
to the optional on-disk :class:`~ctxkit.record.spool.Spool` (replayed later, also by a
new process), or else is dropped and counted. The server is idempotent on
``call_id``, so a resend is always harmless.

With a spool, a batch that gets no answer at all (connection refused, timeout) goes
to disk at once instead of waiting in memory through its retries, and until the
server answers again every new batch is tried once and then spooled. Meanwhile the
worker probes every ``probe_interval`` seconds by sending the oldest spooled segment:
the first answer replays the spool (not the next ``replay_interval`` tick). A server
that answers with an error (5xx, 429, 401/403) is retried with backoff instead.
``shutdown()`` logs how many manifests wait in the spool folder.

When the queue is full, ``capture()`` appends to the spool on the caller's
thread (one small file write); without a spool it just counts a drop.

Do not mutate a manifest after passing it to ``capture()``: it is encoded later,
on the worker thread, to keep the caller's cost to a queue put.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import msgspec

from ctxkit.record.spool import Spool, default_spool_dir, encode_line
from ctxkit.record.transport import (
    BODY_OVERHEAD,
    DEFAULT_HOST,
    PATH,
    Response,
    backoff_delay,
    is_transient,
    make_opener,
    parse_retry_after,
    post_batch,
    rejected_in,
)

logger = logging.getLogger("ctxkit")
__all__ = ["Client", "STAT_KEYS", "backoff_delay", "parse_retry_after"]

MAX_RETRY_AFTER = 300.0  # a longer Retry-After gives up (spools) instead of parking the worker
STAT_KEYS = ("captured", "sent", "spooled", "dropped", "rejected", "retries", "replayed")
_ACCEPTED_TYPES = (msgspec.Struct, dict, bytes)
_FLUSH = object()  # queue markers: wake the worker to send now / to stop
_STOP = object()


class Client:
    """Non-blocking, batching, retrying sender of context manifests."""

    def __init__(
        self,
        api_key: str,
        host: str = DEFAULT_HOST,
        *,
        max_queue: int = 10_000,
        batch_size: int = 100,
        max_batch_bytes: int = 1_000_000,
        flush_interval: float = 1.0,
        timeout: float = 10.0,
        max_retries: int = 5,
        spool_dir: str | os.PathLike[str] | bool | None = None,
        gzip: bool = True,
        on_error: Callable[[str, int], None] | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        spool_max_bytes: int = 100_000_000,
        replay: bool = True,
        replay_interval: float = 30.0,
        replay_segments: int = 10,
        probe_interval: float = 1.0,
    ) -> None:
        """``spool_dir``: a folder for what cannot be sent yet; ``True`` for the per-user default
        folder of this server and key (:func:`~ctxkit.record.spool.default_spool_dir`); ``None``
        or ``False`` for no spool (what cannot be sent is dropped and counted)."""
        self.api_key = api_key
        self.url = host.rstrip("/") + PATH
        self.max_queue = max_queue
        self.batch_size = max(1, batch_size)
        self.max_batch_bytes = max_batch_bytes
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.gzip = gzip
        self.on_error = on_error
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.replay = replay
        self.replay_interval = replay_interval
        self.replay_segments = replay_segments
        self.probe_interval = probe_interval
        self._opener = make_opener()
        self.spool: Spool | None = None
        if spool_dir is True:
            spool_dir = default_spool_dir(host, api_key)
        if spool_dir is not None and spool_dir is not False:
            try:
                self.spool = Spool(spool_dir, max_bytes=spool_max_bytes)
            except OSError:
                logger.exception("ctxkit: cannot use spool directory %s; running without a spool", spool_dir)
        self._closed = False
        self._init_runtime()
        _CLIENTS.add(self)
        # A previous process may have left manifests behind: send them without waiting for a capture.
        if self.spool is not None and replay and self.spool.has_pending():
            self._ensure_worker()

    def _init_runtime(self) -> None:
        """Per-process state; rebuilt in a forked child (the parent's thread and locks do not exist there)."""
        self._pid = os.getpid()
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.max_queue)
        self._cv = threading.Condition(threading.Lock())  # guards _pending and _stats
        self._pending = 0  # captured and not yet sent, rejected, spooled or dropped
        self._stats = dict.fromkeys(STAT_KEYS, 0)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._stop = threading.Event()
        self._urgent = False  # a flush is waiting: send what we have without waiting for the interval
        self._carry: bytes | None = None  # an item that did not fit the previous batch
        self._logged: set[str] = set()
        self._next_replay = 0.0  # monotonic time of the next spool replay; 0 = at worker start
        self._spool_dirty = True
        self._down = False  # the last request got no answer: spool new batches after one try, probe
        self._replay_failures = 0  # replays in a row the server answered with an error

    def _after_fork(self) -> None:
        self._init_runtime()
        if self.spool is not None:
            self.spool.reset_after_fork()

    # ------------------------------------------------------------------ public API

    def capture(self, manifest: msgspec.Struct | dict[str, Any] | bytes) -> bool:
        """Queue one manifest for sending. Never blocks, never raises.

        Returns True when queued (or spooled because the queue was full), False
        when it was dropped.
        """
        try:
            if self._pid != os.getpid():
                self._after_fork()
            with self._cv:
                self._stats["captured"] += 1
                self._pending += 1
        except Exception:
            return False
        try:
            if not isinstance(manifest, _ACCEPTED_TYPES):
                raise TypeError(f"expected a Manifest, dict or JSON bytes, got {type(manifest).__name__}")
            if self._closed:
                return self._overflow(manifest, "client is shut down")
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._ensure_worker()
            self._queue.put_nowait(manifest)
            return True
        except queue.Full:
            return self._overflow(manifest, "queue full")
        except Exception as exc:
            self._finish(done=1, dropped=1)
            self._log_once(f"capture:{type(exc).__name__}", "ctxkit: manifest dropped: %s", exc)
            self._report("dropped: " + str(exc), 1)
            return False

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything captured so far is sent, rejected, spooled or dropped.

        Returns False if that did not happen within ``timeout`` seconds.
        """
        try:
            if self._pid != os.getpid():
                self._after_fork()
            if threading.current_thread() is self._thread:
                return False  # called from on_error on the worker: waiting would deadlock
            with self._cv:
                if self._pending <= 0:
                    return True
            thread = self._thread
            if not self._closed and (thread is None or not thread.is_alive()):
                self._ensure_worker()
            self._urgent = True
            try:
                self._queue.put_nowait(_FLUSH)
            except queue.Full:
                pass  # a full queue keeps the worker busy anyway
            with self._cv:
                return self._cv.wait_for(lambda: self._pending <= 0, timeout)
        except Exception:
            logger.debug("ctxkit: flush failed", exc_info=True)
            return False

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Flush, then stop the worker, all within ``timeout`` seconds.

        What could not be sent in time goes to the spool (if any) or is dropped.
        Returns True when nothing is left pending. Also runs at interpreter exit.
        """
        try:
            if self._pid != os.getpid():
                self._after_fork()
            deadline = time.monotonic() + max(0.0, timeout)
            if not self._closed:
                if self._thread is not None:
                    self.flush(timeout / 2)
                self._closed = True
                self._stop.set()  # wakes a backoff sleep; the worker spools instead of retrying
                try:
                    self._queue.put_nowait(_STOP)
                except queue.Full:
                    pass
            thread = self._thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
            # Items the worker did not get to (it may be stuck in a request): spool or drop them here.
            self._drain_queue(send=False)
            if self.spool is not None:
                self.spool.close()
                waiting = self.spool.waiting()
                if waiting:
                    logger.warning(
                        "ctxkit: %d manifests wait on disk in %s; they are sent when a client with this spool "
                        "runs and ctxview answers, or now with: ctxkit send-spool --dir %s",
                        waiting, self.spool.directory, self.spool.directory)
            with self._cv:
                return self._pending <= 0
        except Exception:
            logger.debug("ctxkit: shutdown failed", exc_info=True)
            return False

    def stats(self) -> dict[str, int]:
        """Counters: captured, sent, spooled, dropped, rejected, retries, replayed (sent
        from the spool), plus queued (now in the queue) and spool_dropped (segments the
        spool deleted to stay within its size bound)."""
        if self._pid != os.getpid():
            self._after_fork()
        with self._cv:
            out = dict(self._stats)
        out["queued"] = self._queue.qsize()
        out["spool_dropped"] = self.spool.dropped if self.spool is not None else 0
        return out

    def drain_spool(self) -> dict[str, int]:
        """Send the spool now, on this thread, with retries (used by ``ctxkit send-spool``).

        Returns manifests sent, rejected and skipped (corrupt lines) and segments left.
        """
        if self.spool is None:
            return {"sent": 0, "rejected": 0, "skipped": 0, "left": 0}
        before = self.stats()
        result = self.spool.drain(lambda lines: self._send_lines(lines, self.max_retries))
        after = self.stats()
        return {
            "sent": after["replayed"] - before["replayed"],
            "rejected": after["rejected"] - before["rejected"],
            "skipped": result.skipped,
            "left": len(self.spool.sealed()),
        }

    # ------------------------------------------------------------------ bookkeeping

    def _finish(self, done: int = 0, **counts: int) -> None:
        """Add to counters and mark ``done`` items finished (wakes flush())."""
        with self._cv:
            for key, value in counts.items():
                self._stats[key] += value
            if done:
                self._pending -= done
                if self._pending <= 0:
                    self._cv.notify_all()

    def _log_once(self, key: str, message: str, *args: Any) -> None:
        level = logging.DEBUG if key in self._logged else logging.WARNING
        self._logged.add(key)
        logger.log(level, message, *args)

    def _report(self, reason: str, count: int) -> None:
        if self.on_error is not None:
            try:
                self.on_error(reason, count)
            except Exception:
                logger.debug("ctxkit: on_error callback failed", exc_info=True)

    def _overflow(self, obj: Any, reason: str) -> bool:
        """Spool one manifest that cannot be queued, or drop it. Always marks it done."""
        spooled = False
        try:
            if self.spool is not None:
                spooled = self.spool.append([obj]) == 1
                self._spool_dirty = True
        except Exception:
            logger.debug("ctxkit: spool append failed", exc_info=True)
        finally:
            self._finish(done=1, **({"spooled": 1} if spooled else {"dropped": 1}))
        if not spooled:
            self._log_once("drop:" + reason, "ctxkit: manifest dropped (%s)", reason)
            self._report("dropped: " + reason, 1)
        return spooled

    def _give_up(self, lines: list[bytes], reason: str) -> None:
        """Lines that could not be sent: spool them or count them dropped (not marked done here)."""
        written = 0
        if self.spool is not None:
            try:
                written = self.spool.append(lines)
                self._spool_dirty = True
            except Exception:
                logger.warning("ctxkit: spool append failed", exc_info=True)
        self._finish(spooled=written, dropped=len(lines) - written)
        if written < len(lines):
            self._log_once("drop:" + reason, "ctxkit: %d manifests dropped (%s)", len(lines) - written, reason)
            self._report("dropped: " + reason, len(lines) - written)

    # ------------------------------------------------------------------ worker

    def _ensure_worker(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="ctxkit-worker", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        stop = self._stop
        while not stop.is_set():
            try:
                batch = self._collect()
                if batch:
                    self._send_or_spool(batch)
                if self.spool is not None and self.replay and time.monotonic() >= self._next_replay:
                    self._replay()
            except Exception:
                logger.exception("ctxkit: worker error")  # keep the thread alive whatever happens
                stop.wait(0.1)
        self._drain_queue(send=self.spool is None)

    def _encode(self, obj: Any) -> bytes | None:
        """One manifest as JSON bytes; None (counted dropped, marked done) if it cannot be."""
        try:
            data = encode_line(obj)
            if isinstance(obj, bytes) and not isinstance(msgspec.json.decode(data), dict):
                raise ValueError("bytes are not a JSON object")  # one bad line would fail the whole batch
            return data
        except Exception as exc:
            self._finish(done=1, dropped=1)
            self._log_once(f"encode:{type(exc).__name__}", "ctxkit: manifest dropped, cannot encode: %s", exc)
            self._report("dropped: cannot encode", 1)
            return None

    def _collect(self) -> list[bytes]:
        """Up to batch_size items / max_batch_bytes, waiting at most flush_interval after the first."""
        items: list[bytes] = []
        size = BODY_OVERHEAD
        deadline: float | None = None
        if self._carry is not None:
            items.append(self._carry)
            size += len(self._carry) + 1
            self._carry = None
            deadline = time.monotonic() + self.flush_interval
        while len(items) < self.batch_size and size < self.max_batch_bytes and not self._stop.is_set():
            if self._urgent:
                timeout: float | None = 0.0
            elif deadline is not None:
                timeout = max(0.0, deadline - time.monotonic())
            elif self.spool is not None and self.replay:
                timeout = max(0.01, self._next_replay - time.monotonic())
            else:
                timeout = None
            try:
                obj = self._queue.get(timeout=timeout) if timeout != 0.0 else self._queue.get_nowait()
            except queue.Empty:
                self._urgent = False
                break
            if obj is _FLUSH:
                self._urgent = True
                continue
            if obj is _STOP:
                break
            data = self._encode(obj)
            if data is None:
                continue
            if items and size + len(data) + 1 > self.max_batch_bytes:
                self._carry = data
                break
            items.append(data)
            size += len(data) + 1
            if deadline is None:
                deadline = time.monotonic() + self.flush_interval
        return items

    def _send_or_spool(self, batch: list[bytes]) -> None:
        try:
            ok = self._send_batch(batch, 0 if self._down else self.max_retries)
            if not ok:
                self._give_up(batch, "server unreachable")
                if self._down:
                    self._next_replay = min(self._next_replay, time.monotonic() + self.probe_interval)
            elif self._spool_dirty:
                self._next_replay = 0.0  # the server is back: replay the spool now
        except Exception:
            logger.exception("ctxkit: send failed")
            self._give_up(batch, "send error")
        finally:
            self._finish(done=len(batch))

    def _drain_queue(self, *, send: bool) -> None:
        """On stop: take everything left in the queue (and the carry) and send it once or spool it."""
        lines: list[bytes] = []
        if self._carry is not None:
            lines.append(self._carry)
            self._carry = None
        while True:
            try:
                obj = self._queue.get_nowait()
            except queue.Empty:
                break
            if obj is _FLUSH or obj is _STOP:
                continue
            data = self._encode(obj)
            if data is not None:
                lines.append(data)
        for start in range(0, len(lines), self.batch_size):
            chunk = lines[start : start + self.batch_size]
            try:
                if not (send and self._send_batch(chunk, 0)):
                    self._give_up(chunk, "shutdown")
            finally:
                self._finish(done=len(chunk))

    def _replay(self) -> None:
        """Send spooled segments (ours, a previous process's, a crashed one's) in the background."""
        assert self.spool is not None
        failed = False

        def send(lines: list[bytes]) -> bool:
            nonlocal failed
            ok = self._send_lines(lines, 0)  # one try: new captures must not wait behind a dead server
            failed = failed or not ok
            return ok

        try:
            result = self.spool.drain(send, max_segments=self.replay_segments)
        except Exception:
            logger.exception("ctxkit: spool replay failed")
            result = None
            failed = True
        self._spool_dirty = failed or (result is not None and result.left > 0)
        more = result is not None and result.left > 0 and not failed
        if more:
            delay = 0.0
        elif failed and self._down:
            delay = self.probe_interval  # nobody answers: try again soon, a refused connection is cheap
        elif failed:
            self._replay_failures += 1  # the server answers with errors: back off up to replay_interval
            delay = min(self.replay_interval, self.probe_interval * 2 ** min(self._replay_failures, 16))
        else:
            delay = self.replay_interval
        if not failed:
            self._replay_failures = 0
        self._next_replay = time.monotonic() + delay

    # ------------------------------------------------------------------ HTTP

    def _send_lines(self, lines: list[bytes], retries: int) -> bool:
        """Send spooled lines in batches; True when the server gave a final answer for all."""
        start = 0
        while start < len(lines):
            size, end = BODY_OVERHEAD, start
            while end < len(lines) and end - start < self.batch_size:
                if end > start and size + len(lines[end]) + 1 > self.max_batch_bytes:
                    break
                size += len(lines[end]) + 1
                end += 1
            if not self._send_batch(lines[start:end], retries, replay=True):
                return False
            start = end
        return True

    def _send_batch(self, lines: list[bytes], retries: int, replay: bool = False) -> bool:
        """POST one batch. True: final answer (accepted, duplicate or rejected), counted.
        False: still failing after ``retries`` retries (the caller spools or drops)."""
        attempt = 0
        while True:
            response = post_batch(
                self._opener, self.url, self.api_key, lines, compress=self.gzip, timeout=self.timeout
            )
            status = response.status
            self._down = status is None and self.spool is not None
            if status is not None and 200 <= status < 300:
                self._account(response, len(lines), replay)
                return True
            if status == 413 and len(lines) > 1:  # too large: halve until it fits
                half = len(lines) // 2
                return self._send_batch(lines[:half], retries, replay) and self._send_batch(
                    lines[half:], retries, replay
                )
            if status in (401, 403) and (replay or self.spool is not None):
                # A wrong key is not the data's fault: keep spooled manifests for when it is fixed.
                self._log_once(f"status:{status}", "ctxkit: server refused the API key (HTTP %s); spooling", status)
                return False
            if not is_transient(status):
                self._finish(rejected=len(lines))
                self._log_once(
                    f"status:{status}",
                    "ctxkit: server refused %d manifests with HTTP %s: %s",
                    len(lines),
                    status,
                    response.body[:500].decode("utf-8", "replace"),
                )
                self._report(f"rejected: HTTP {status}", len(lines))
                return True
            if attempt >= retries or self._stop.is_set() or self._down:
                # With a spool, no answer at all sends the batch to disk now: the probe finds the server.
                self._log_once("transient", "ctxkit: sending failed (%s)", response.error or f"HTTP {status}")
                return False
            delay = backoff_delay(attempt, self.backoff_base, self.backoff_cap)
            if response.retry_after is not None:
                if response.retry_after > MAX_RETRY_AFTER:
                    return False
                delay = max(delay, response.retry_after)
            self._finish(retries=1)
            if self._stop.wait(delay):
                return False
            attempt += 1

    def _account(self, response: Response, count: int, replay: bool) -> None:
        """Count a 2xx answer: accepted and duplicates are delivered, rejected ones are not."""
        rejected, first = rejected_in(response.body, count)
        if rejected:
            self._log_once(
                "rejected-items",
                "ctxkit: server rejected %d manifests, e.g. %s: %s",
                rejected,
                first.get("call_id"),
                first.get("errors"),
            )
            self._report("rejected: invalid manifest", rejected)
        self._finish(rejected=rejected, **{"replayed" if replay else "sent": count - rejected})


# One atexit hook and one fork hook for all clients; a WeakSet so neither keeps a client alive.
_CLIENTS: weakref.WeakSet[Client] = weakref.WeakSet()


def _shutdown_all() -> None:
    for client in list(_CLIENTS):
        client.shutdown()


def _reinit_after_fork() -> None:
    for client in list(_CLIENTS):
        try:
            client._after_fork()
        except Exception:
            pass


atexit.register(_shutdown_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
