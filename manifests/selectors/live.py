"""The live tail: the calls a project accepts, newest first, as they arrive (docs/dashboard.md, "Live").

Arrival order is the calls' primary key: ingest numbers every stored call from one sequence
(SQLite's rowid, PostgreSQL's identity), so "after cursor N" is ``pk > N``, read from the
primary key's index. The read is bounded by the call's time as well (``started_at`` within
:data:`LOOKBACK`), so on PostgreSQL, where the calls table is partitioned by day on
``started_at``, only the last day's partitions are planned and read. A call whose time lies
further back (a back-filled import) is stored and listed as usual, but is not "live".

Rows come from the stored call alone; the analysed figures (hit rate, cost, cache cause)
are shown when analysis has written them and left blank until then, so a call appears as
soon as ingest has committed it, whether analysis runs in-process or on a worker.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.urls import reverse
from django.utils import timezone

from ctxkit.models import format_usd
from manifests.models import Call, Project
from manifests.selectors.call_list import CallQuery, calls
from manifests.selectors.filters import FilterError, Filters

# The rows the page keeps: the first paint's and each poll's most, and the DOM's bound.
WINDOW = 200
# How far back a call's time may lie for it to count as live.
LOOKBACK = timedelta(hours=24)
# The cursor is a call's primary key; a bigint.
MAX_CURSOR = 2**63 - 1


@dataclass(frozen=True)
class LiveSlice:
    rows: list[dict[str, Any]]
    # The highest call pk read (the ``after`` given when there was nothing new).
    cursor: int
    # More calls than WINDOW arrived after the cursor: the oldest of them are left out.
    truncated: bool


def parse_cursor(raw: str | None) -> int:
    """``?after=``: a call pk (0, or absent, for "from the newest WINDOW calls")."""
    raw = (raw or "").strip()
    if not raw:
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19 or int(raw) > MAX_CURSOR:
        raise FilterError("after", f"{raw[:40]!r} is not a cursor (a whole number from a previous answer)")
    return int(raw)


def bounded(filters: Filters, now: datetime) -> Filters:
    """The dashboard's filters, with the start moved up to ``now - LOOKBACK`` if it lies earlier."""
    floor = now - LOOKBACK
    if filters.since is not None and filters.since >= floor:
        return filters
    return dataclasses.replace(filters, since=floor)


def arrivals(project: Project, filters: Filters, cq: CallQuery, *, after: int = 0,
             now: datetime | None = None) -> LiveSlice:
    """The newest calls (at most WINDOW, newest first) that the filters select and that
    arrived after the call pk ``after``."""
    qs = calls(project, bounded(filters, now or timezone.now()), cq)
    if after:
        qs = qs.filter(pk__gt=after)
    found = list(
        qs.select_related("run", "figures", "cache_event")
        .only("pk", "call_id", "step", "agent", "model", "status", "started_at", "received_at", "input_tokens",
              "output_tokens", "evidence_count", "evidence_missing", "analyzed_at", "run__run_id",
              "figures__cache_hit_ratio", "figures__cost", "figures__cost_usd", "cache_event__cause",
              "cache_event__changed_segment")
        .order_by("-pk")[: WINDOW + 1]
    )
    truncated = len(found) > WINDOW
    found = found[:WINDOW]
    return LiveSlice(rows=[row(project, c) for c in found], cursor=found[0].pk if found else after,
                     truncated=truncated)


def _related(call: Call, name: str) -> Any:
    try:
        return getattr(call, name)
    except ObjectDoesNotExist:
        return None


def _pct(value: float | None) -> str:
    # As the calls list's ``pct`` filter shows a hit rate.
    return "" if value is None else f"{value * 100:.0f}%"


def row(project: Project, call: Call) -> dict[str, Any]:
    """One arrival as the page and its poll both show it: plain values and display strings,
    which the template escapes and the script sets as text."""
    figures = _related(call, "figures")
    event = _related(call, "cache_event")
    return {
        "id": call.pk,
        "call_id": call.call_id,
        "url": reverse("call-detail", args=[project.slug, call.call_id]),
        "run_id": call.run.run_id,
        "run_url": reverse("run-detail", args=[project.slug, call.run.run_id]),
        "step": call.step,
        "agent": call.agent,
        "model": call.model,
        "status": call.status,
        "started_at": call.started_at.isoformat(),
        "started": timezone.localtime(call.started_at).strftime("%Y-%m-%d %H:%M:%S"),
        "received_at": call.received_at.isoformat(),
        "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens,
        "evidence": f"{call.evidence_missing} / {call.evidence_count}",
        "evidence_missing": call.evidence_missing,
        "analysed": call.analyzed_at is not None,
        "hit": _pct(figures.cache_hit_ratio) if figures else "",
        "cost": f"{_usd(figures.cost_usd)} · {figures.cost:.3f}" if figures else "",
        "cache": event.cause if event else "",
        "cache_segment": event.changed_segment if event else "",
    }


def _usd(amount: float | None) -> str:
    return "–" if amount is None else format_usd(amount)
