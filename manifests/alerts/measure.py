"""What an alert rule measures, read from the hourly rollups (or, for one watched evidence
key, the attributions of the same hours): never a scan that grows with the stored calls.

A window of N hours is the hour buckets from the hour of ``now - N h`` on: between N and
N + 1 hours, as the dashboard's ranges read the same rollups. Each figure keeps its one
definition (ctxkit.figures through manifests/selectors/series.py): the hit rate of summed
tokens, cost per verified success as the rollups' cost over their verified successes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from manifests import figures
from manifests.models import AlertRule, Attribution, Rollup
from manifests.selectors import series
from manifests.selectors.filters import Filters


@dataclass(frozen=True)
class Measurement:
    """``value`` is None when the window has nothing to measure (no input tokens, no
    verified success): the rule then keeps its state."""

    value: float | None
    holds: bool | None


def window_start(now: datetime, hours: int) -> datetime:
    """The first hour bucket of the window."""
    return (now - timedelta(hours=hours)).replace(minute=0, second=0, microsecond=0)


def _filters(rule: AlertRule, now: datetime) -> Filters:
    return Filters(agent=rule.agent, model=rule.model, range="custom",
                   since=now - timedelta(hours=rule.window_hours), as_of=now)


def _evidence_lost(rule: AlertRule, now: datetime) -> int:
    if rule.evidence_key:
        start = window_start(now, rule.window_hours)
        rows = Attribution.objects.filter(project_id=rule.project_id, started_at__gte=start,
                                          evidence_key=rule.evidence_key, is_risk=False)
        if rule.agent or rule.model:
            # The call's time bounds the join to the window's partitions (PostgreSQL).
            rows = rows.filter(call__started_at__gte=start, **({"call__agent": rule.agent} if rule.agent else {}),
                               **({"call__model": rule.model} if rule.model else {}))
        return rows.count()
    buckets = series.rollups(rule.project, _filters(rule, now), Rollup.HOUR).values_list("attributions", flat=True)
    return sum(n for causes in buckets for cause, n in (causes or {}).items() if cause in figures.MISSING_CAUSES)


def measure(rule: AlertRule, now: datetime) -> Measurement:
    """The rule's figure over its window ending at ``now``, and whether its condition holds."""
    if rule.kind == AlertRule.EVIDENCE_LOST:
        lost = _evidence_lost(rule, now)
        return Measurement(float(lost), lost > rule.threshold)
    totals = series.totals(rule.project, _filters(rule, now))
    if rule.kind == AlertRule.INVARIANT_FAILURES:
        failures = totals["invariant_failures"]
        return Measurement(float(failures), failures > rule.threshold)
    if rule.kind == AlertRule.HIT_RATE_BELOW:
        rate = totals.hit_rate
        return Measurement(rate, None if rate is None else rate < rule.threshold)
    if rule.kind == AlertRule.COST_PER_SUCCESS_ABOVE:
        cost = totals.cost_per_success
        return Measurement(cost, None if cost is None else cost > rule.threshold)
    if rule.kind == AlertRule.COST_USD_PER_SUCCESS_ABOVE:
        cost = totals.cost_usd_per_success
        return Measurement(cost, None if cost is None else cost > rule.threshold)
    raise ValueError(f"unknown alert kind {rule.kind!r}")


__all__ = ["Measurement", "measure", "window_start"]
