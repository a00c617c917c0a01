"""Evaluating alert rules: each rule's state changes only when its condition starts or
stops to hold, and each change writes one AlertEvent (its delivery is deliver.py's).

Safe to rerun and to run on several workers at once: a rule is evaluated under its row
lock, a change is decided against the stored state, and an event is unique per (rule,
episode, transition), so a second run over the same data changes nothing and sends nothing.

The rules read the rollups, so a run first refreshes the buckets that analysis marked dirty
since the rollups' own refresh (a no-op with the embedded default, which refreshes at once):
a rule sees every call analysed before it runs, not one rollup interval later.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from ctxkit.models import format_usd
from manifests.alerts.measure import Measurement, measure
from manifests.analysis import rollups
from manifests.models import AlertEvent, AlertRule

MAX_RULES_PER_RUN = 5000


def _scope(rule: AlertRule) -> str:
    parts = [f"agent {rule.agent}" if rule.agent else "", f"model {rule.model}" if rule.model else ""]
    return " / ".join(p for p in parts if p) or "all agents and models"


def figure(rule: AlertRule, value: float | None) -> str:
    """A measured value in the rule's unit (a hit rate as a percentage)."""
    if value is None:
        return "nothing to measure"
    if rule.kind == AlertRule.HIT_RATE_BELOW:
        return f"{value:.1%}"
    if rule.kind == AlertRule.COST_PER_SUCCESS_ABOVE:
        return f"{value:,.2f} units"
    if rule.kind == AlertRule.COST_USD_PER_SUCCESS_ABOVE:
        return format_usd(value)
    return f"{value:g}"


def describe(rule: AlertRule) -> str:
    """The rule in a phrase, as the settings page and the messages say it."""
    window = f"over {rule.window_hours} h"
    if rule.kind == AlertRule.HIT_RATE_BELOW:
        what = f"cache hit rate below {rule.threshold:.1%}"
    elif rule.kind == AlertRule.INVARIANT_FAILURES:
        what = (f"more than {rule.threshold:g} compaction invariant failures" if rule.threshold
                else "any compaction invariant failure")
    elif rule.kind == AlertRule.EVIDENCE_LOST:
        key = f"evidence {rule.evidence_key!r}" if rule.evidence_key else "required evidence"
        what = f"{key} lost more than {rule.threshold:g} times" if rule.threshold else f"{key} lost at all"
    elif rule.kind == AlertRule.COST_USD_PER_SUCCESS_ABOVE:
        what = f"cost per verified success above {format_usd(rule.threshold)}"
    else:
        what = f"cost per verified success above {rule.threshold:,.2f} units"
    return f"{what} {window}, {_scope(rule)}"


def summary(rule: AlertRule, transition: str, value: float | None) -> str:
    now = figure(rule, value)
    if transition == AlertEvent.FIRING:
        return f"Firing: {describe(rule)} (now {now})."
    return f"Resolved: {describe(rule)} no longer holds (now {now})."


def evaluate_rule(rule_id: int, *, now: datetime | None = None) -> int | None:
    """Measure one rule and record a change of its state. Returns the new event's id, or
    None when nothing changed (or the rule is gone)."""
    now = now or timezone.now()
    with transaction.atomic():
        rule = (AlertRule.objects.select_related("project").select_for_update(of=("self",))
                .filter(pk=rule_id).first())
        if rule is None:
            return None
        result: Measurement = measure(rule, now)
        rule.evaluated_at = now
        rule.last_value = result.value
        changed = result.holds is not None and result.holds != rule.firing
        if not changed:
            rule.save(update_fields=["evaluated_at", "last_value"])
            return None
        rule.firing = bool(result.holds)
        if rule.firing:
            rule.episode += 1
        rule.changed_at = now
        rule.save(update_fields=["evaluated_at", "last_value", "firing", "episode", "changed_at"])
        transition = AlertEvent.FIRING if rule.firing else AlertEvent.RESOLVED
        event, created = AlertEvent.objects.get_or_create(
            rule=rule, episode=rule.episode, transition=transition,
            defaults={"project_id": rule.project_id, "at": now, "value": result.value,
                      "summary": summary(rule, transition, result.value)},
        )
        return event.pk if created else None


def evaluate_all(*, now: datetime | None = None) -> list[int]:
    """Evaluate every rule, each in its own transaction; returns the new events' ids."""
    now = now or timezone.now()
    if AlertRule.objects.exists():
        rollups.refresh()
    ids = AlertRule.objects.order_by("pk").values_list("pk", flat=True)[:MAX_RULES_PER_RUN]
    return [pk for pk in (evaluate_rule(rule_id, now=now) for rule_id in ids) if pk is not None]
