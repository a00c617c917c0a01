"""Reads over the analysis: trends from the rollups, the same aggregate from the raw
tables (for checking and benchmarking the rollups), and the compaction review list.

The dashboard reads rollups for any range longer than a day: 30 daily rows per
agent/model instead of every item of the month.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDay, TruncHour

from ctxkit.record.manifest import ABSENT_ACTIONS
from manifests.models import Attribution, Call, Compaction, CompactionFigures, Item, Project, Rollup

TREND_SUMS = (
    "calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "uncached_input_tokens",
    "cost",
    "verified_successes",
    "evidence_total",
    "evidence_present",
    "invariant_failures",
)


def _finish(points: dict[datetime, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for start in sorted(points):
        p = points[start]
        p["start"] = start
        p["hit_rate"] = p["cache_read_tokens"] / p["input_tokens"] if p["input_tokens"] else 0.0
        p["evidence_coverage"] = p["evidence_present"] / p["evidence_total"] if p["evidence_total"] else None
        p["cost_per_verified_success"] = p["cost"] / p["verified_successes"] if p["verified_successes"] else None
        out.append(p)
    return out


def _empty() -> dict[str, Any]:
    point: dict[str, Any] = {f: 0 for f in TREND_SUMS}
    point["tokens_by_kind"] = {}
    point["attributions"] = {}
    return point


def trend(
    project: Project, *, start: datetime, end: datetime, bucket: str = Rollup.DAY, agent: str | None = None,
    model: str | None = None,
) -> list[dict[str, Any]]:
    """Per bucket (day or hour) in [start, end): totals, hit rate, cost per verified
    success, evidence coverage, tokens by item kind and attributions by cause."""
    rows = Rollup.objects.filter(project=project, bucket=bucket, start__gte=start, start__lt=end)
    if agent is not None:
        rows = rows.filter(agent=agent)
    if model is not None:
        rows = rows.filter(model=model)
    points: dict[datetime, dict[str, Any]] = defaultdict(_empty)
    for row in rows.values("start", *TREND_SUMS, "tokens_by_kind", "attributions"):
        p = points[row["start"]]
        for f in TREND_SUMS:
            p[f] += row[f]
        for name in ("tokens_by_kind", "attributions"):
            for k, n in row[name].items():
                p[name][k] = p[name].get(k, 0) + n
    return _finish(points)


def trend_from_raw(
    project: Project, *, start: datetime, end: datetime, bucket: str = Rollup.DAY, agent: str | None = None,
    model: str | None = None,
) -> list[dict[str, Any]]:
    """The same figures as :func:`trend`, aggregated from the raw tables (calls, items,
    figures, compactions, attributions). Slow on months of data: it is the baseline the
    rollups are checked and measured against (bench/analysis.py)."""
    trunc = TruncDay if bucket == Rollup.DAY else TruncHour
    calls = Call.objects.filter(project=project, started_at__gte=start, started_at__lt=end, analyzed_at__isnull=False)
    if agent is not None:
        calls = calls.filter(agent=agent)
    if model is not None:
        calls = calls.filter(model=model)
    points: dict[datetime, dict[str, Any]] = defaultdict(_empty)
    for row in (
        calls.annotate(t=trunc("started_at", tzinfo=UTC))
        .values("t")
        .annotate(
            calls=Count("pk"),
            input_tokens=Sum("input_tokens"),
            cache_read_tokens=Sum("cache_read_tokens"),
            cache_write_tokens=Sum("cache_write_tokens"),
            output_tokens=Sum("output_tokens"),
            uncached_input_tokens=Sum("figures__uncached_input_tokens"),
            cost=Sum("figures__cost"),
            verified_successes=Count("pk", filter=Q(verified="yes")),
            evidence_total=Sum("evidence_count"),
            evidence_missing=Sum("evidence_missing"),
        )
        .order_by("t")
    ):
        p = points[row["t"]]
        for f in TREND_SUMS:
            if f in row:
                p[f] = row[f] or 0
        p["evidence_present"] = (row["evidence_total"] or 0) - (row["evidence_missing"] or 0)
    ids = calls.values("pk")
    for row in (
        Item.objects.filter(call__in=ids)
        .exclude(action__in=ABSENT_ACTIONS)
        .annotate(t=trunc("call__started_at", tzinfo=UTC))
        .values("t", "kind")
        .annotate(tokens=Sum(Coalesce("used_tokens", "granted_tokens", "requested_tokens")))
        .order_by()
    ):
        if row["tokens"]:
            points[row["t"]]["tokens_by_kind"][row["kind"]] = row["tokens"]
    for row in (
        Compaction.objects.filter(call__in=ids)
        .annotate(t=trunc("call__started_at", tzinfo=UTC))
        .values("t")
        .annotate(failures=Sum("failed_invariants"))
        .order_by()
    ):
        points[row["t"]]["invariant_failures"] = row["failures"] or 0
    for row in (
        Attribution.objects.filter(call__in=ids)
        .annotate(t=trunc("started_at", tzinfo=UTC))
        .values("t", "cause")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        points[row["t"]]["attributions"][row["cause"]] = row["n"]
    return _finish(points)


def compaction_failures(project: Project, *, start: datetime | None = None,
                        end: datetime | None = None) -> QuerySet[CompactionFigures]:
    """Compactions that broke an invariant, newest first, with the call where the loss
    happened and the fields that were lost (the review list)."""
    rows = CompactionFigures.objects.filter(project=project, failed=True)
    if start is not None:
        rows = rows.filter(started_at__gte=start)
    if end is not None:
        rows = rows.filter(started_at__lt=end)
    return rows.select_related("compaction", "call").order_by("-started_at", "-pk")

