"""The cache view: hit rate by agent and model, regressions with their prefix diff, the
prefix registry, and what the misses cost."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, Sum

from ctxkit.figures import hit_rate
from manifests.models import CacheEvent, PrefixEntry, Project
from manifests.selectors import series as s
from manifests.selectors.filters import Filters
from manifests.selectors.overview import filtered_regressions, regression_markers
from manifests.selectors.savings import FIXABLE, regression_savings

MAX_POINTS = 5000  # per-call points on the chart; beyond that the hourly roll-up is enough


def by_agent_model(project: Project, filters: Filters) -> list[dict[str, Any]]:
    rows = (
        s.rollups(project, filters)
        .values("agent", "model")
        .annotate(calls=Sum("calls"), input=Sum("input_tokens"), read=Sum("cache_read_tokens"),
                  write=Sum("cache_write_tokens"), cost=Sum("cost"), cost_usd=Sum("cost_usd"),
                  prefix_changes=Sum("prefix_changes"))
        .order_by("agent", "model")
    )
    out = []
    for r in rows:
        r["hit_rate"] = hit_rate(r["read"], r["input"])
        out.append(r)
    return out


def miss_cost(project: Project, filters: Filters) -> dict[str, Any]:
    """What the misses added, per model and cause: ctxkit.figures.cache_saving of each miss
    (its prefix written or sent uncached instead of read from the cache) at its model's
    prices, stored on the event by the analysis, in units and in USD (None: the model has no USD
    price). Misses below the provider's minimum could not hit anyway."""
    qs = filters.apply(CacheEvent.objects.filter(project=project, cause__in=FIXABLE))
    totals = qs.values("model", "cause").annotate(n=Count("*"), extra=Sum("saving"), extra_usd=Sum("saving_usd")) \
        .order_by("model", "cause")
    rows = [{"model": r["model"], "cause": r["cause"], "calls": r["n"], "extra": r["extra"] or 0.0,
             "extra_usd": r["extra_usd"]} for r in totals]
    usd = [r["extra_usd"] for r in rows if r["extra_usd"] is not None]
    return {"rows": rows, "total": sum(r["extra"] for r in rows), "total_usd": sum(usd) if usd else None}


def regressions(project: Project, filters: Filters, limit: int = 50) -> list[dict[str, Any]]:
    """Regression cards. Text and table come from one comparison, the regression's own:
    the prefix most baseline calls shared against the prefix of the call where the rate
    crossed the threshold (so the card never names a hash its table does not show)."""
    regs = list(filtered_regressions(project, filters)[:limit])
    worth = regression_savings(project, filters, regs)
    out = []
    for r in regs:
        segments = segment_diff(r.segments_before, r.segments_after)
        changed = next((seg for seg in segments if seg["changed"]), None)
        out.append({
            "regression": r,
            "segment": r.changed_segment or (changed["name"] if changed else ""),
            "before": r.prefix_before,
            "after": r.prefix_after,
            "segments": segments,
            "changed": changed,
            # Raw segments, for the prefix line diff partial (selectors/prefix_lines.py).
            "before_segments": r.segments_before,
            "after_segments": r.segments_after,
            "saving": worth[r.pk],
        })
    return out


def segment_diff(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Segment by segment: hash before and after, and whether it changed."""
    old = {seg.get("name"): seg for seg in before or []}
    rows = []
    for seg in after or []:
        prev = old.pop(seg.get("name"), None)
        rows.append({"name": seg.get("name"), "before": prev.get("hash") if prev else None,
                     "after": seg.get("hash"), "tokens": seg.get("tokens"),
                     "changed": prev is None or prev.get("hash") != seg.get("hash")})
    for name, prev in old.items():
        rows.append({"name": name, "before": prev.get("hash"), "after": None, "tokens": prev.get("tokens"),
                     "changed": True})
    return rows


PREFIXES_PER_PAGE = 25


def prefixes(project: Project, filters: Filters, page: str | int | None) -> Page[PrefixEntry]:
    qs = PrefixEntry.objects.filter(project=project)
    if filters.since is not None:
        qs = qs.filter(last_seen__gte=filters.since)
    if filters.until is not None:
        qs = qs.filter(first_seen__lt=filters.until)
    return Paginator(qs.order_by("-last_seen", "-pk"), PREFIXES_PER_PAGE).get_page(page)


def chart(project: Project, filters: Filters) -> dict[str, Any]:
    """Hit rate over time per agent/model (roll-ups), the causes per bucket, and per-call points
    coloured by cause when the range holds few enough calls."""
    bucket = s.bucket_for(filters)
    lines: dict[str, dict[str, Any]] = defaultdict(dict)
    owners: dict[str, tuple[str, str]] = {}
    calls = 0
    causes_at: dict[datetime, dict[str, int]] = {}  # the cache causes per bucket, all lines together
    iso: dict[datetime, str] = {}
    rows = s.rollups(project, filters, bucket).values_list(
        "start", "agent", "model", "calls", "input_tokens", "cache_read_tokens", "cache_causes").order_by("start")
    for start, agent, model, n_calls, input_tokens, read, cache_causes in rows:
        calls += n_calls
        at = causes_at.get(start)
        if at is None:
            at = causes_at[start] = defaultdict(int)
            iso[start] = start.isoformat()
        for cause, n in (cache_causes or {}).items():
            at[cause] += n
        name = f"{agent} · {model}"
        owners[name] = (agent, model)
        acc = lines[name].setdefault(iso[start], [0, 0])
        acc[0] += read
        acc[1] += input_tokens
    starts = sorted(causes_at)
    causes = s.ranked_keys(causes_at[t] for t in starts)
    points = []
    qs = CacheEvent.objects.filter(project=project)
    if filters.since is not None:
        qs = qs.filter(started_at__gte=filters.since)
    if filters.until is not None:
        qs = qs.filter(started_at__lt=filters.until)
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.model:
        qs = qs.filter(model=filters.model)
    # Whether the range holds few enough calls is read from the roll-ups (their buckets may
    # reach past the range's ends: a threshold, not a figure); the limit holds while they lag.
    if calls <= MAX_POINTS:
        points = list(qs.order_by("started_at").values("started_at", "hit_ratio", "cause", "changed_segment",
                                                       "call__call_id", "agent")[:MAX_POINTS])
    return {
        "bucket": bucket,
        "lines": {name: {"x": list(v), "y": [hit_rate(a, b) for a, b in v.values()],
                         "agent": owners[name][0], "model": owners[name][1]}
                  for name, v in lines.items()},
        "x": [iso[t] for t in starts],
        "causes": {c: [causes_at[t].get(c, 0) for t in starts] for c in causes},
        "points": points,
        "regressions": regression_markers(list(filtered_regressions(project, filters)[:50])),
    }


