"""Hourly and daily rollups per project / agent / model.

Idempotent by construction: a touched bucket is recomputed from the source rows
(calls, their figures, items, evidence, compactions, attributions, cache events)
and overwritten, never incremented, so analysing a call twice, or a task
redelivered after a worker died, cannot count anything twice. A day is the sum of
its hours. Only analysed calls count.

Incremental: the analysis does not recompute the buckets it touches; it marks them
dirty (:func:`mark`, one ``RollupMark`` row per hour bucket per chunk) in the same
transaction that marks its calls analysed, so a mark commits exactly when its calls
do and a worker killed mid-chunk leaves neither. :func:`refresh` (the beat task
``refresh_rollups``, every ``CTXVIEW_ROLLUP_INTERVAL_SECONDS``) recomputes each dirty
bucket once, however many batches marked it, and deletes the marks it claimed, and
only those: a mark committed while it runs stays for the next run. With the interval
0 (the embedded default, which has no beat) the analysis refreshes right after each
task instead (manifests/analysis/pipeline.py).

Two workers refreshing at once claim different marks (``SKIP LOCKED``); two that end up
recomputing one bucket are serialised by a row lock on the rollup (taken in one global
order, so they cannot deadlock): the second one computes after the first committed and
therefore sees its rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from manifests import figures
from manifests.models import Attribution, CacheEvent, Call, Compaction, Item, Rollup, RollupMark

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)

# (bucket, project_id, start, agent, model): "day" < "hour", one total order for locking.
Key = tuple[str, int, datetime, str, str]

SUM_FIELDS = figures.ROLLUP_SUM_FIELDS
DICT_FIELDS = figures.ROLLUP_MAP_FIELDS


def hour_start(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def day_start(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def keys_for(rows: Iterable[tuple[int, datetime, str, str]]) -> set[Key]:
    """The hour and day buckets of (project_id, started_at, agent, model) rows."""
    keys: set[Key] = set()
    for project_id, started_at, agent, model in rows:
        keys.add((Rollup.HOUR, project_id, hour_start(started_at), agent, model))
        keys.add((Rollup.DAY, project_id, day_start(started_at), agent, model))
    return keys


def _key_q(key: Key) -> Q:
    bucket, project_id, start, agent, model = key
    return Q(bucket=bucket, project_id=project_id, start=start, agent=agent, model=model)


def _lock(keys: list[Key]) -> dict[Key, int]:
    """Create the missing rollup rows and lock them all, in key order. Returns their pks."""
    Rollup.objects.bulk_create(
        [Rollup(bucket=b, project_id=p, start=s, agent=a, model=m) for b, p, s, a, m in keys],
        ignore_conflicts=True,
    )
    query = Q()
    for key in keys:
        query |= _key_q(key)
    rows = (
        Rollup.objects.select_for_update()
        .filter(query)
        .order_by("bucket", "project_id", "start", "agent", "model")
        .values_list("pk", "bucket", "project_id", "start", "agent", "model")
    )
    return {(b, p, s.astimezone(UTC), a, m): pk for pk, b, p, s, a, m in rows}


def _money(cost: float) -> float:
    """Costs are float sums whose last bits depend on the order the database adds them in;
    rounded to a millionth of a unit, a recomputed bucket is equal to the one it replaces."""
    return round(float(cost), 6)


def _usd(cost: float) -> float:
    """USD sums, rounded as :func:`_money` does, to a billionth of a dollar (a call often costs
    less than a cent)."""
    return round(float(cost), 9)


def _counts(queryset: Any, field: str) -> dict[str, int]:
    return {k: n for k, n in queryset.values_list(field).annotate(n=Count("pk")).order_by(field) if n}


def hour_values(project_id: int, start: datetime, agent: str, model: str) -> dict[str, Any]:
    """One hour bucket, computed from the source rows."""
    calls = Call.objects.filter(
        project_id=project_id,
        agent=agent,
        model=model,
        started_at__gte=start,
        started_at__lt=start + HOUR,
        analyzed_at__isnull=False,
    )
    totals = calls.aggregate(
        calls=Count("pk"),
        items=Sum("item_count"),
        input_tokens=Sum("input_tokens"),
        cache_read_tokens=Sum("cache_read_tokens"),
        cache_write_tokens=Sum("cache_write_tokens"),
        output_tokens=Sum("output_tokens"),
        uncached_input_tokens=Sum("figures__uncached_input_tokens"),
        cost=Sum("figures__cost"),
        cost_usd=Sum("figures__cost_usd"),
        verified_successes=Count("pk", filter=Q(verified="yes")),
        evidence_total=Sum("evidence_count"),
        evidence_missing=Sum("evidence_missing"),
    )
    values: dict[str, Any] = {k: v or 0 for k, v in totals.items()}
    values["evidence_present"] = values["evidence_total"] - values.pop("evidence_missing")
    values["cost"] = _money(values["cost"])
    values["cost_usd"] = _usd(values["cost_usd"])
    ids = calls.values("pk")
    # The children carry their call's time: the hour names their partition (PostgreSQL).
    hour = {"started_at__gte": start, "started_at__lt": start + HOUR}
    comp = Compaction.objects.filter(call__in=ids, **hour).aggregate(n=Count("pk"), failures=Sum("failed_invariants"))
    values["compactions"] = comp["n"] or 0
    values["invariant_failures"] = comp["failures"] or 0
    values["attributions"] = _counts(Attribution.objects.filter(call__in=ids), "cause")
    values["cache_causes"] = _counts(CacheEvent.objects.filter(call__in=ids), "cause")
    values["prefix_changes"] = values["cache_causes"].get(CacheEvent.PREFIX_CHANGED, 0)
    values["tokens_by_kind"] = {
        kind: tokens
        for kind, tokens in Item.objects.filter(call__in=ids, **hour)
        .values_list("kind")
        .annotate(t=Sum(figures.context_tokens()))
        .order_by("kind")
        if tokens
    }
    return values


def day_values(project_id: int, start: datetime, agent: str, model: str) -> dict[str, Any]:
    """One day bucket: the sum of its hour buckets (already recomputed)."""
    values: dict[str, Any] = {f: 0 for f in SUM_FIELDS}
    for name in DICT_FIELDS:
        values[name] = {}
    hours = Rollup.objects.filter(
        project_id=project_id, bucket=Rollup.HOUR, start__gte=start, start__lt=start + DAY, agent=agent, model=model
    )
    for row in hours.order_by("start"):
        for f in SUM_FIELDS:
            values[f] += getattr(row, f)
        for name in DICT_FIELDS:
            target = values[name]
            for k, n in getattr(row, name).items():
                target[k] = target.get(k, 0) + n
    values["cost"] = _money(values["cost"])
    values["cost_usd"] = _usd(values["cost_usd"])
    return values


def recompute(keys: set[Key]) -> int:
    """Recompute and overwrite the given buckets (hours first: days add them up).
    Returns how many hour buckets were recomputed."""
    if not keys:
        return 0
    ordered = sorted(keys)
    pks = _lock(ordered)
    now = timezone.now()
    for key in sorted(ordered, key=lambda k: k[0] != Rollup.HOUR):
        bucket, project_id, start, agent, model = key
        compute = hour_values if bucket == Rollup.HOUR else day_values
        values = compute(project_id, start, agent, model)
        pk = pks.get(key)
        if pk is None:  # cannot happen after _lock; never write a second row for a key
            continue
        if not values["calls"]:
            Rollup.objects.filter(pk=pk).delete()
            continue
        Rollup.objects.filter(pk=pk).update(computed_at=now, **values)
    return sum(1 for key in ordered if key[0] == Rollup.HOUR)


# (project_id, hour start, agent, model): an hour bucket as a mark names it.
Mark = tuple[int, datetime, str, str]


def interval_seconds() -> float:
    """How often dirty buckets are refreshed; 0: right after each analysis task."""
    return float(settings.CTXVIEW_ROLLUP_INTERVAL_SECONDS)


def mark(rows: Iterable[tuple[int, datetime, str, str]]) -> int:
    """Mark the hour buckets of (project_id, started_at, agent, model) rows dirty, inside the
    caller's transaction (the one that marks the calls analysed). Returns marks written."""
    marks = sorted({(project_id, hour_start(at), agent, model) for project_id, at, agent, model in rows})
    RollupMark.objects.bulk_create(
        [RollupMark(project_id=p, start=s, agent=a, model=m) for p, s, a, m in marks], batch_size=500
    )
    return len(marks)


def dirty() -> set[Mark]:
    """The hour buckets marked dirty and not refreshed yet."""
    rows = RollupMark.objects.values_list("project_id", "start", "agent", "model").distinct()
    return {(p, s.astimezone(UTC), a, m) for p, s, a, m in rows}


def _claim(group: list[Mark], ceiling: int) -> list[tuple[int, Mark]]:
    """Lock the marks of ``group`` (up to ``ceiling``) that no other refresh holds."""
    query = Q()
    for project_id, start, agent, model in group:
        query |= Q(project_id=project_id, start=start, agent=agent, model=model)
    rows = (
        RollupMark.objects.select_for_update(skip_locked=True)
        .filter(query, pk__lte=ceiling)
        .order_by("pk")
        .values_list("pk", "project_id", "start", "agent", "model")
    )
    return [(pk, (p, s.astimezone(UTC), a, m)) for pk, p, s, a, m in rows]


def refresh(*, batch: int = 100) -> int:
    """Recompute every bucket marked dirty before this run started, once each, and delete
    the marks it claimed. Returns how many hour buckets were recomputed.

    Each group of ``batch`` buckets is one transaction: claim their marks (``SKIP
    LOCKED``: a concurrent refresh holding some leaves them to it), recompute the hours
    and their days, delete exactly the claimed marks by primary key. The claim is a
    statement of its own, so every call whose mark it claimed is committed and seen by the
    recompute that follows; a mark it did not see, whatever its id, is not deleted. Marks
    made after the run started (above ``ceiling``) wait for the next run, so a refresh
    under a steady load ends."""
    ceiling = RollupMark.objects.aggregate(top=Max("pk"))["top"]
    if ceiling is None:
        return 0
    marked = RollupMark.objects.filter(pk__lte=ceiling).values_list("project_id", "start", "agent", "model")
    pending = sorted(
        {(p, s.astimezone(UTC), a, m) for p, s, a, m in marked.distinct()},
        key=lambda k: (k[0], k[2], k[3], k[1]),  # one day's hours together: its day is summed once
    )
    refreshed = 0
    for n in range(0, len(pending), batch):
        with transaction.atomic():
            claimed = _claim(pending[n : n + batch], ceiling)
            if not claimed:
                continue
            buckets = {key for _, key in claimed}
            refreshed += recompute(keys_for(buckets))
            RollupMark.objects.filter(pk__in=[pk for pk, _ in claimed]).delete()
    return refreshed


def rebuild(*, project_id: int, start: datetime, end: datetime, batch: int = 200) -> int:
    """Recompute every bucket of a project with analysed calls in [start, end), and every
    bucket already stored there (one whose calls are gone is deleted): after a change of
    rules, or for data loaded in bulk (``manage.py rebuild_rollups``). Returns buckets recomputed."""
    from django.db import transaction

    hours = (
        Call.objects.filter(project_id=project_id, started_at__gte=start, started_at__lt=end, analyzed_at__isnull=False)
        .annotate(hour=TruncHour("started_at", tzinfo=UTC))
        .values_list("hour", "agent", "model")
        .distinct()
    )
    keys = keys_for((project_id, h, a, m) for h, a, m in hours)
    stored = Rollup.objects.filter(project_id=project_id, start__lt=end).filter(
        Q(bucket=Rollup.HOUR, start__gte=hour_start(start)) | Q(bucket=Rollup.DAY, start__gte=day_start(start)))
    keys |= {(b, project_id, s, a, m) for b, s, a, m in stored.values_list("bucket", "start", "agent", "model")}
    ordered = sorted(keys, key=lambda k: (k[0] != Rollup.HOUR, k))
    for n in range(0, len(ordered), batch):
        with transaction.atomic():
            recompute(set(ordered[n : n + batch]))
    return len(ordered)
