"""Roll-up reads shared by the overview and the cache view: totals and time series."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min, QuerySet, Sum
from django.utils import timezone

from ctxkit.figures import coverage, hit_rate
from manifests import figures
from manifests.models import Project, Rollup, RollupMark
from manifests.selectors.filters import Filters

SUM_FIELDS = figures.ROLLUP_SUM_FIELDS
HOURLY_UP_TO = timedelta(days=7)


def bucket_for(filters: Filters) -> str:
    """Hourly buckets up to a week (at most 168 points), daily ones beyond (or for "all")."""
    span = filters.span
    return Rollup.HOUR if span is not None and span <= HOURLY_UP_TO else Rollup.DAY


def _floor(moment: datetime, bucket: str) -> datetime:
    moment = moment.replace(minute=0, second=0, microsecond=0)
    return moment.replace(hour=0) if bucket == Rollup.DAY else moment


def rollups(project: Project, filters: Filters, bucket: str | None = None) -> QuerySet[Rollup]:
    bucket = bucket or bucket_for(filters)
    qs = Rollup.objects.filter(project=project, bucket=bucket)
    if filters.since is not None:
        qs = qs.filter(start__gte=_floor(filters.since, bucket))
    if filters.until is not None:
        qs = qs.filter(start__lt=filters.until)
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.model:
        qs = qs.filter(model=filters.model)
    return qs


@dataclass
class Totals:
    values: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SUM_FIELDS, 0))

    def __getitem__(self, key: str) -> float:
        return self.values.get(key) or 0

    @property
    def hit_rate(self) -> float | None:
        return hit_rate(int(self["cache_read_tokens"]), int(self["input_tokens"]))

    @property
    def evidence_coverage(self) -> float | None:
        return coverage(int(self["evidence_present"]), int(self["evidence_total"]))

    @property
    def cost_per_success(self) -> float | None:
        return self["cost"] / self["verified_successes"] if self["verified_successes"] else None

    @property
    def cost_usd_per_success(self) -> float | None:
        return self["cost_usd"] / self["verified_successes"] if self["verified_successes"] else None


def totals(project: Project, filters: Filters) -> Totals:
    row = rollups(project, filters).aggregate(**{f: Sum(f) for f in SUM_FIELDS})
    return Totals({k: v or 0 for k, v in row.items()})


@dataclass
class Series:
    """Per-bucket sums, in time order, with the JSON maps merged."""

    bucket: str
    starts: list[datetime]
    sums: dict[str, list[float]]
    maps: dict[str, list[dict[str, int]]]

    def hit_rate(self) -> list[float | None]:
        """ctxkit.figures.hit_rate per bucket."""
        return [hit_rate(int(n), int(d))
                for n, d in zip(self.sums["cache_read_tokens"], self.sums["input_tokens"], strict=True)]

    def keys(self, name: str) -> list[str]:
        return ranked_keys(self.maps[name])


def ranked_keys(maps: Iterable[Mapping[str, int]]) -> list[str]:
    """The keys of per-bucket maps ({cause: count}), the largest total first."""
    seen: dict[str, int] = defaultdict(int)
    for m in maps:
        for k, v in m.items():
            seen[k] += v
    return sorted(seen, key=lambda k: -seen[k])


def series(project: Project, filters: Filters, *, maps: tuple[str, ...] = ("attributions", "tokens_by_kind",
                                                                          "cache_causes")) -> Series:
    bucket = bucket_for(filters)
    by_start: dict[datetime, dict[str, Any]] = {}
    for row in rollups(project, filters, bucket).values("start", *SUM_FIELDS, *maps).order_by("start"):
        acc = by_start.setdefault(row["start"], {**dict.fromkeys(SUM_FIELDS, 0), **{m: defaultdict(int) for m in maps}})
        for f in SUM_FIELDS:
            acc[f] += row[f] or 0
        for m in maps:
            for k, v in (row[m] or {}).items():
                acc[m][k] += v
    starts = sorted(by_start)
    return Series(
        bucket=bucket,
        starts=starts,
        sums={f: [by_start[s][f] for s in starts] for f in SUM_FIELDS},
        maps={m: [dict(by_start[s][m]) for s in starts] for m in maps},
    )


@dataclass(frozen=True)
class Lag:
    """Hours of the project with calls analysed but not yet in the rollups."""

    hours: int
    seconds: float  # since the oldest of their marks


def lag(project: Project) -> Lag | None:
    """None when every analysed call is in the rollups (the pages then say nothing)."""
    row = RollupMark.objects.filter(project=project).aggregate(
        hours=Count("start", distinct=True), oldest=Min("marked_at")
    )
    if not row["hours"]:
        return None
    return Lag(row["hours"], max(0.0, (timezone.now() - row["oldest"]).total_seconds()))
