"""What instrument() records, and the thread that turns it into manifests.

On the agent's thread a call costs a few object references: the request's keyword arguments
(with a shallow copy of the message list, since agents append to it right after the call),
the response or the exception, and two clock readings, put on a bounded queue. Parsing the
request, estimating tokens, hashing the prefix and building the manifest happen on one daemon
thread, which hands the manifest to the non-blocking :class:`ctxkit.Client`. A full queue
drops the record (counted); nothing here raises into the agent.
"""

from __future__ import annotations

import collections
import contextvars
import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

logger = logging.getLogger("ctxkit")


@dataclass
class Scope:
    """Run, agent and required evidence for the calls made inside ``instrument.run(...)``."""

    run_id: str | None = None
    agent: str | None = None
    evidence: list[str] | dict[str, str] | None = None
    window: int | None = None


# Steps count per run id across every instrumented client of the process (an agent may call
# Anthropic and OpenAI within one run).
step_counters: dict[str, itertools.count[int]] = {}
step_counters_lock = threading.Lock()

_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("ctxkit_instrument_scope", default=None)


@contextmanager
def run(*, run_id: str | None = None, agent: str | None = None,
        evidence: list[str] | dict[str, str] | None = None, window: int | None = None) -> Iterator[Scope]:
    """Calls made inside belong to ``run_id`` / ``agent`` and check ``evidence`` (literals, or
    ``{key: literal}``). Nested scopes inherit what they do not set. Works across threads
    started inside only if they copy the context (contextvars), and in asyncio tasks."""
    outer = _scope.get()
    scope = Scope(
        run_id=run_id or (outer.run_id if outer else None),
        agent=agent or (outer.agent if outer else None),
        evidence=evidence if evidence is not None else (outer.evidence if outer else None),
        window=window or (outer.window if outer else None),
    )
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


@dataclass(slots=True)
class CallRecord:
    """One model call as seen on the agent's thread; turned into a manifest later."""

    adapter: Callable[[CallRecord], Any]  # builds the manifest
    kwargs: dict[str, Any]
    run_id: str
    step: int
    agent: str
    evidence: list[str] | dict[str, str] | None
    window: int | None
    include_text: bool
    started: float  # time.time()
    duration: float = 0.0
    response: Any = None
    error: BaseException | None = None
    stream_events: list[Any] | None = None
    _call_id: str = ""

    @property
    def call_id(self) -> str:
        # Made on the builder thread, on first use: a uuid4 costs microseconds the agent should not pay.
        if not self._call_id:
            self._call_id = uuid.uuid4().hex
        return self._call_id

    @property
    def started_at(self) -> datetime:
        return datetime.fromtimestamp(self.started, tz=UTC)

    @property
    def ended_at(self) -> datetime:
        return self.started_at + timedelta(seconds=self.duration)


class Recorder:
    """The per-process buffer and builder thread shared by every instrumented client of one key.

    The buffer is a deque (an append is atomic and costs a fraction of a queue.Queue put, which
    takes a lock and notifies); the builder thread drains it and sleeps ``POLL`` seconds when it
    is empty, so a manifest reaches ctxkit's Client at most that much later.
    """

    POLL = 0.05

    def __init__(self, client: Any, *, agent: str, run_id: str | None, include_text: bool,
                 window: int | None, max_queue: int = 10_000) -> None:
        self.client = client  # a ctxkit.Client (or anything with capture/flush/shutdown)
        self.agent = agent
        self.default_run = run_id or f"{agent}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}"
        self.include_text = include_text
        self.window = window
        self.max_queue = max_queue
        self._buffer: collections.deque[CallRecord] = collections.deque()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._busy = False
        self._pid = os.getpid()
        self.stats = {"recorded": 0, "dropped": 0, "failed": 0}

    def new_record(self, adapter: Callable[[CallRecord], Any], kwargs: dict[str, Any],
                   per_call: dict[str, Any] | None) -> CallRecord:
        scope = _scope.get()
        if per_call is None and scope is None:  # the common case, kept short
            run_id, agent, evidence, window = self.default_run, self.agent, None, self.window
        else:
            per_call = per_call or {}
            run_id = per_call.get("run_id") or (scope.run_id if scope else None) or self.default_run
            agent = per_call.get("agent") or (scope.agent if scope else None) or self.agent
            evidence = per_call.get("evidence")
            if evidence is None and scope is not None:
                evidence = scope.evidence
            window = per_call.get("window") or (scope.window if scope else None) or self.window
        counter = step_counters.get(run_id)
        if counter is None:
            with step_counters_lock:
                counter = step_counters.setdefault(run_id, itertools.count())
        return CallRecord(adapter, kwargs, str(run_id), next(counter), str(agent), evidence, window,
                          self.include_text, time.time())

    def submit(self, record: CallRecord) -> None:
        try:
            if self._pid != os.getpid():  # forked: the parent's thread does not exist here
                self._pid, self._thread, self._buffer = os.getpid(), None, collections.deque()
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._start()
            if len(self._buffer) >= self.max_queue:
                self.stats["dropped"] += 1
                return
            self._buffer.append(record)
        except Exception:  # never into the agent
            self.stats["dropped"] += 1

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="ctxkit-instrument", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        buffer = self._buffer
        while True:
            try:
                self._busy = True
                record = buffer.popleft()
            except IndexError:
                self._busy = False
                self._wake.wait(self.POLL)
                self._wake.clear()
                if buffer is not self._buffer:
                    return  # replaced after a fork
                continue
            try:
                manifest = record.adapter(record)
                if manifest is not None:
                    self.client.capture(manifest)
                    self.stats["recorded"] += 1
            except Exception:
                self.stats["failed"] += 1
                logger.debug("ctxkit.instrument: could not build a manifest", exc_info=True)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every recorded call is built and handed to the Client, then flush the Client."""
        deadline = time.monotonic() + timeout
        while (self._buffer or self._busy) and self._thread is not None and self._thread.is_alive():
            if time.monotonic() > deadline:
                return False
            self._wake.set()
            time.sleep(0.005)
        return bool(self.client.flush(timeout=max(0.0, deadline - time.monotonic())))
