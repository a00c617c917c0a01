"""What instrument() records, and the thread that turns it into manifests.

On the agent's thread a call costs a few object references: the request's keyword arguments
(with a shallow copy of the message list, since agents append to it right after the call),
the response or the exception, and two clock readings, put on a bounded queue. Parsing the
request, estimating tokens, hashing the prefix and building the manifest happen on the one
background worker (ctxkit.record.background), which hands the manifest to the non-blocking
:class:`ctxkit.Client`. A full queue drops the record (counted); nothing here raises into the agent.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ctxkit.manifest import Workspace
from ctxkit.providers.call import CallRecord
from ctxkit.record.background import Background

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


class Recorder:
    """The per-process builder shared by every instrumented client of one key: the calls go to
    the one background worker (ctxkit.record.background), which builds each manifest and hands
    it to the non-blocking ctxkit Client."""

    def __init__(self, client: Any, *, agent: str, run_id: str | None, include_text: bool,
                 window: int | None, max_queue: int = 10_000, workspace: Workspace | None = None) -> None:
        self.client = client  # a ctxkit.Client (or anything with capture/flush/shutdown)
        self.agent = agent
        self.default_run = run_id or f"{agent}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{os.getpid()}"
        self.include_text = include_text
        self.window = window
        self.workspace = workspace  # where the agent works, on every manifest
        self.stats = {"recorded": 0, "dropped": 0, "failed": 0}
        self.background: Background[CallRecord] = Background(self._build, name="ctxkit-instrument",
                                                             max_queue=max_queue, stats=self.stats)

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
        self.background.submit(record)

    def _build(self, record: CallRecord) -> None:
        try:
            manifest = record.adapter(record)
            if manifest is not None:
                if self.workspace is not None:
                    manifest.workspace = self.workspace
                self.client.capture(manifest)
                self.stats["recorded"] += 1
        except Exception:
            self.stats["failed"] += 1
            logger.debug("ctxkit.instrument: could not build a manifest", exc_info=True)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every recorded call is built and handed to the Client, then flush the Client."""
        deadline = time.monotonic() + timeout
        if not self.background.drain(deadline):
            return False
        return bool(self.client.flush(timeout=max(0.0, deadline - time.monotonic())))
