"""Alert rules: what a rule may say (validated with the JSON path of each bad field) and the
writes that create and delete rules. The settings page and the API share both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from manifests.models import AlertRule, Project

MAX_RULES_PER_PROJECT = 50
MAX_WINDOW_HOURS = 168  # a week of hourly rollup buckets
MAX_NAME = 200
_CONTROL = re.compile("[\x00-\x1f\x7f]")

KINDS = dict(AlertRule.KINDS)
FORMATS = dict(AlertRule.FORMATS)
FIELDS = ("kind", "threshold", "window_hours", "agent", "model", "evidence_key", "format")

# The threshold's meaning per kind: (unit for messages, default when omitted).
THRESHOLDS: dict[str, tuple[str, float | None]] = {
    AlertRule.HIT_RATE_BELOW: ("a hit rate between 0 and 1 (0.5 is 50 %)", None),
    AlertRule.INVARIANT_FAILURES: ("a count of failed invariants (0: any failure)", 0.0),
    AlertRule.EVIDENCE_LOST: ("a count of losses (0: any loss)", 0.0),
    AlertRule.COST_PER_SUCCESS_ABOVE: ("cost units per verified success", None),
    AlertRule.COST_USD_PER_SUCCESS_ABOVE: ("US dollars per verified success", None),
}


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str


class RuleInputError(ValueError):
    """Bad rule input; ``errors`` name each bad field by its path (``$.threshold``)."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.path}: {e.message}" for e in errors))
        self.errors = errors


@dataclass(frozen=True)
class RuleSpec:
    kind: str
    threshold: float
    window_hours: int = 1
    agent: str = ""
    model: str = ""
    evidence_key: str = ""
    format: str = AlertRule.AUTO


def _number(value: Any, *, text_allowed: bool) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and text_allowed:
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def parse_rule(data: Any, *, root: str = "$.", from_form: bool = False) -> RuleSpec:
    """A rule from a JSON object (the API) or a form's fields (``from_form``: numbers arrive
    as text, empty fields count as omitted). Raises RuleInputError naming every bad field."""
    if not isinstance(data, Mapping):
        raise RuleInputError([FieldError(root.rstrip("."), "send a JSON object with the rule's fields")])
    errors: list[FieldError] = []

    def bad(name: str, message: str) -> None:
        errors.append(FieldError(f"{root}{name}", message))

    given = {k: v for k, v in data.items() if not (from_form and v in ("", None))}
    if not from_form:
        for name in given:
            if name not in FIELDS:
                bad(str(name)[:MAX_NAME], f"unknown field; a rule has {', '.join(FIELDS)}")

    kind = given.get("kind")
    if kind not in KINDS:
        bad("kind", f"must be one of {', '.join(KINDS)}")
        kind = None

    texts: dict[str, str] = {}
    for name in ("agent", "model", "evidence_key"):
        value = given.get(name, "")
        if not isinstance(value, str) or len(value) > MAX_NAME or _CONTROL.search(value):
            bad(name, f"must be text of at most {MAX_NAME} characters without control characters")
            value = ""
        texts[name] = value.strip()
    if kind is not None and kind != AlertRule.EVIDENCE_LOST and texts["evidence_key"]:
        bad("evidence_key", "only an evidence_lost rule watches an evidence key")

    fmt = given.get("format", AlertRule.AUTO)
    if fmt not in FORMATS:
        bad("format", f"must be one of {', '.join(FORMATS)}")

    window = _number(given.get("window_hours", 1), text_allowed=from_form)
    if window is None or window != int(window) or not 1 <= window <= MAX_WINDOW_HOURS:
        bad("window_hours", f"must be a whole number of hours, 1 to {MAX_WINDOW_HOURS}")
        window = 1

    threshold: float | None = None
    if kind is not None:
        unit, default = THRESHOLDS[kind]
        raw = given.get("threshold", default)
        threshold = None if raw is None else _number(raw, text_allowed=from_form)
        if threshold is None:
            bad("threshold", f"must be a number: {unit}")
        elif kind == AlertRule.HIT_RATE_BELOW and not 0 < threshold <= 1:
            bad("threshold", f"must be {unit}, above 0")
        elif kind in (AlertRule.INVARIANT_FAILURES, AlertRule.EVIDENCE_LOST) and (
            threshold < 0 or threshold != int(threshold) or threshold > 1_000_000
        ):
            bad("threshold", f"must be a whole number, 0 to 1000000: {unit}")
        elif kind in (AlertRule.COST_PER_SUCCESS_ABOVE, AlertRule.COST_USD_PER_SUCCESS_ABOVE) \
                and not 0 < threshold <= 1e12:
            bad("threshold", f"must be above 0: {unit}")

    if errors:
        raise RuleInputError(errors)
    assert kind is not None and threshold is not None
    return RuleSpec(kind=kind, threshold=threshold, window_hours=int(window), format=fmt, **texts)


@transaction.atomic
def create_rule(*, project: Project, spec: RuleSpec) -> AlertRule:
    """Create a rule (not firing; the next evaluation measures it)."""
    # Locked: two concurrent creations cannot both pass the limit.
    Project.objects.select_for_update().filter(pk=project.pk).first()
    if AlertRule.objects.filter(project=project).count() >= MAX_RULES_PER_PROJECT:
        raise RuleInputError([FieldError("$", f"a project has at most {MAX_RULES_PER_PROJECT} alert rules")])
    return AlertRule.objects.create(
        project=project,
        kind=spec.kind,
        threshold=spec.threshold,
        window_hours=spec.window_hours,
        agent=spec.agent,
        model=spec.model,
        evidence_key=spec.evidence_key,
        format=spec.format,
    )


def delete_rule(*, project: Project, rule_id: int) -> bool:
    """Delete a rule of ``project`` (and its events); False when it has no such rule."""
    deleted, _ = AlertRule.objects.filter(project=project, pk=rule_id).delete()
    return deleted > 0


def rules_of(project: Project) -> list[AlertRule]:
    return list(AlertRule.objects.filter(project=project).order_by("pk"))


def as_dict(rule: AlertRule) -> dict[str, Any]:
    """A rule as the API answers it: its definition and its state."""
    return {
        "id": rule.pk,
        "kind": rule.kind,
        "threshold": rule.threshold,
        "window_hours": rule.window_hours,
        "agent": rule.agent,
        "model": rule.model,
        "evidence_key": rule.evidence_key,
        "format": rule.format,
        "created": rule.created.isoformat(),
        "state": {
            "firing": rule.firing,
            "episode": rule.episode,
            "changed_at": rule.changed_at.isoformat() if rule.changed_at else None,
            "last_value": rule.last_value,
            "evaluated_at": rule.evaluated_at.isoformat() if rule.evaluated_at else None,
        },
    }
