"""The project overview: headline figures against the previous period and the charts' data."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from manifests.figures import MISSING_CAUSES, RISK_CAUSES
from manifests.models import Attribution, Call, Project, Regression, Run
from manifests.selectors import series as s
from manifests.selectors.filters import Filters, bound_call


def _runs(project: Project, filters: Filters) -> int:
    qs = Run.objects.filter(project=project)
    qs = filters.apply(qs, since_field="last_seen", until_field="first_seen")
    return qs.count()


def _headline(totals: s.Totals, runs: int) -> dict[str, float | None]:
    return {
        "calls": totals["calls"],
        "runs": runs,
        "hit_rate": totals.hit_rate,
        "evidence_coverage": totals.evidence_coverage,
        "invariant_failures": totals["invariant_failures"],
        "cost_usd": totals["cost_usd"],
        "cost": totals["cost"],
        "cost_usd_per_success": totals.cost_usd_per_success,
        "cost_per_success": totals.cost_per_success,
    }


# (key, label, format, whether higher is better) for the headline cards.
CARDS = [
    ("calls", "Calls", "int", None),
    ("runs", "Runs", "int", None),
    ("hit_rate", "Cache hit rate", "pct", True),
    ("evidence_coverage", "Evidence coverage", "pct", True),
    ("invariant_failures", "Invariant failures", "int", False),
    ("cost_usd", "Cost (USD)", "usd", False),
    ("cost", "Cost (relative units)", "num", False),
    ("cost_usd_per_success", "Cost per verified success (USD)", "usd", False),
    ("cost_per_success", "Cost per verified success (units)", "num", False),
]


def headline(project: Project, filters: Filters) -> list[dict[str, Any]]:
    """One card per figure: this period, the previous one of the same length, the change."""
    now = _headline(s.totals(project, filters), _runs(project, filters))
    prev_filters = filters.previous()
    before = _headline(s.totals(project, prev_filters), _runs(project, prev_filters)) if prev_filters else {}
    cards = []
    for key, label, fmt, higher_better in CARDS:
        value, old = now[key], before.get(key)
        delta = None if value is None or old is None else value - old
        good = None
        if delta and higher_better is not None:
            good = (delta > 0) == higher_better
        cards.append({"key": key, "label": label, "fmt": fmt, "value": value, "previous": old, "delta": delta,
                      "good": good})
    return cards


def regressions(project: Project, filters: Filters, limit: int = 20) -> list[Regression]:
    """Regressions in the range, latest first; ``segment`` is the prefix segment that changed
    (from the regression, else from the cache event of the call where it was detected)."""
    regs = list(filtered_regressions(project, filters)[:limit])
    for r in regs:
        r.segment = r.changed_segment
    return regs


def filtered_regressions(project: Project, filters: Filters) -> QuerySet[Regression]:
    # Their calls are read afterwards for the rows shown (prefetch: one query by id each,
    # none when there are no regressions), not joined: a join to the partitioned calls table
    # is planned over every day's partition, whatever the range.
    qs = Regression.objects.filter(project=project).prefetch_related("call", "first_call")
    qs = filters.apply(qs, since_field="detected_at")
    return qs.order_by("-detected_at")


def recent_missing(project: Project, filters: Filters, limit: int = 8) -> list[Attribution]:
    """The latest missing-evidence attributions (not the risk flags), for links to their calls."""
    qs = Attribution.objects.filter(project=project, is_risk=False)
    qs = filters.apply(qs, agent_field="call__agent", model_field="call__model")
    if filters.agent or filters.model:
        qs = bound_call(qs, filters)
    rows = list(qs.order_by("-started_at")[:limit])
    if rows:
        # The rows' calls, each from its own day's partition (an attribution has its call's time).
        calls = Call.objects.filter(pk__in={a.call_id for a in rows}, started_at__in={a.started_at for a in rows})
        by_pk = {c.pk: c for c in calls.select_related("run").defer("raw", "prefix_segments", "warnings")}
        for a in rows:
            a.call = by_pk[a.call_id]
        lost = {a.lost_at_id for a in rows if a.lost_at_id is not None}
        if lost:
            # Each lost-at call is an earlier call of its row's run: read within the runs'
            # time span, not joined by id over every day's partition.
            first = min(a.call.run.first_seen for a in rows if a.lost_at_id is not None)
            last = max(a.started_at for a in rows if a.lost_at_id is not None)
            at = {c.pk: c for c in Call.objects.filter(pk__in=lost, started_at__gte=first, started_at__lte=last)
                  .only("pk", "call_id", "step", "started_at")}
            for a in rows:
                if a.lost_at_id is not None:
                    a.lost_at = at.get(a.lost_at_id)
    return rows


def regression_markers(regs: list[Regression]) -> list[dict[str, Any]]:
    """The chart markers of regressions: the same stored figures as the cards and the
    overview box (baseline and current rate of the two W-call windows)."""
    return [
        {"at": r.detected_at.isoformat(), "agent": r.agent, "model": r.model,
         "baseline": r.baseline_rate, "current": r.current_rate, "cause": r.cause,
         "segment": r.changed_segment, "window": r.window_calls,
         "first_at": r.first_call.started_at.isoformat() if r.first_call else None}
        for r in regs
    ]


def charts(project: Project, filters: Filters, regs: list[Regression]) -> dict[str, Any]:
    """The chart data, passed to the page with json_script."""
    data = s.series(project, filters)
    x = [t.isoformat() for t in data.starts]
    kinds = data.keys("tokens_by_kind")
    causes = data.keys("attributions")
    return {
        "bucket": data.bucket,
        "x": x,
        "hit_rate": data.hit_rate(),
        "calls": data.sums["calls"],
        "prefix_changes": data.sums["prefix_changes"],
        "regressions": regression_markers(regs),
        "by_kind": {k: [m.get(k, 0) for m in data.maps["tokens_by_kind"]] for k in kinds},
        "cached": {
            "cache read": data.sums["cache_read_tokens"],
            "cache write": data.sums["cache_write_tokens"],
            "uncached": data.sums["uncached_input_tokens"],
        },
        # Missing evidence (it did not reach the model) and risks (it did) are two charts.
        "causes": {c: [m.get(c, 0) for m in data.maps["attributions"]] for c in causes if c in MISSING_CAUSES},
        "risks": {c: [m.get(c, 0) for m in data.maps["attributions"]] for c in causes if c in RISK_CAUSES},
    }
