"""Alert rules: what a rule may say, stated once as :class:`AlertRuleSerializer` (it validates
the API's JSON and the settings page's form with the JSON path of each bad field, writes the
API's answers and documents both), and the writes that create and delete rules.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from rest_framework import serializers

from manifests.inputs import Choice, FieldError, InputError, InputSerializer, Number, Text, Whole, validated
from manifests.models import AlertRule, Project

MAX_RULES_PER_PROJECT = 50
MAX_WINDOW_HOURS = 168  # a week of hourly rollup buckets
MAX_NAME = 200
MAX_COUNT = 1_000_000
MAX_COST = 1e12

# The threshold's meaning per kind: (unit for messages, default when omitted).
THRESHOLDS: dict[str, tuple[str, float | None]] = {
    AlertRule.HIT_RATE_BELOW: ("a hit rate between 0 and 1 (0.5 is 50 %)", None),
    AlertRule.INVARIANT_FAILURES: ("a count of failed invariants (0: any failure)", 0.0),
    AlertRule.EVIDENCE_LOST: ("a count of losses (0: any loss)", 0.0),
    AlertRule.COST_USD_PER_SUCCESS_ABOVE: ("US dollars per verified success", None),
    AlertRule.COST_PER_SUCCESS_ABOVE: ("cost units per verified success", None),
}


def threshold_error(kind: str, threshold: float) -> str | None:
    """Why ``threshold`` cannot be a ``kind`` rule's threshold; None when it can."""
    unit, _ = THRESHOLDS[kind]
    if kind == AlertRule.HIT_RATE_BELOW and not 0 < threshold <= 1:
        return f"must be {unit}, above 0"
    if kind in (AlertRule.INVARIANT_FAILURES, AlertRule.EVIDENCE_LOST) and (
        threshold < 0 or threshold != int(threshold) or threshold > MAX_COUNT
    ):
        return f"must be a whole number, 0 to {MAX_COUNT}: {unit}"
    if kind in (AlertRule.COST_PER_SUCCESS_ABOVE, AlertRule.COST_USD_PER_SUCCESS_ABOVE) \
            and not 0 < threshold <= MAX_COST:
        return f"must be above 0: {unit}"
    return None


class RuleInputError(InputError):
    """Bad rule input; ``errors`` name each bad field by its path (``$.threshold``)."""


@dataclass(frozen=True)
class RuleSpec:
    kind: str
    threshold: float
    window_hours: int = 1
    agent: str = ""
    model: str = ""
    evidence_key: str = ""
    format: str = AlertRule.AUTO


class AlertRuleStateSerializer(serializers.Serializer[AlertRule]):
    """A rule's state, written by the evaluation only."""

    firing = serializers.BooleanField(help_text="Whether the condition holds now")
    episode = serializers.IntegerField(help_text="Episodes started so far; the current one if firing")
    changed_at = serializers.DateTimeField(allow_null=True, help_text="When firing last changed")
    last_value = serializers.FloatField(allow_null=True, help_text="The figure at the last evaluation")
    evaluated_at = serializers.DateTimeField(allow_null=True)


_NAME = f"must be text of at most {MAX_NAME} characters without control characters"


class AlertRuleSerializer(InputSerializer):
    """An alert rule: what a client sends (the API's JSON, the settings page's form) and what
    the API answers (with ``id``, ``created`` and ``state``)."""

    noun = "rule"

    id = serializers.IntegerField(read_only=True)
    kind = Choice(AlertRule.KINDS)
    threshold = Number(required=False, says="must be a number", help_text="; ".join(
        f"{kind}: {unit}" + ("" if default is None else f" (default {default:g})")
        for kind, (unit, default) in THRESHOLDS.items()))
    window_hours = Whole(default=1, min_value=1, max_value=MAX_WINDOW_HOURS,
                         says=f"must be a whole number of hours, 1 to {MAX_WINDOW_HOURS}")
    agent = Text(default="", allow_blank=True, max_length=MAX_NAME, says=_NAME, help_text="empty: every agent")
    model = Text(default="", allow_blank=True, max_length=MAX_NAME, says=_NAME, help_text="empty: every model")
    evidence_key = Text(default="", allow_blank=True, max_length=MAX_NAME, says=_NAME,
                        help_text="evidence_lost only; empty: any required evidence")
    format = Choice(AlertRule.FORMATS, default=AlertRule.AUTO,
                    help_text="auto: Slack or Discord by the webhook URL's host, else JSON")
    created = serializers.DateTimeField(read_only=True)
    state = AlertRuleStateSerializer(source="*", read_only=True)

    def check(self, attrs: dict[str, Any]) -> Iterator[tuple[str, str]]:
        kind = attrs.get("kind")
        if kind is None:
            return
        if kind != AlertRule.EVIDENCE_LOST and attrs.get("evidence_key"):
            yield "evidence_key", "only an evidence_lost rule watches an evidence key"
        unit, default = THRESHOLDS[kind]
        threshold = attrs.setdefault("threshold", default)
        if threshold is None:
            yield "threshold", f"must be a number: {unit}"
        elif (why := threshold_error(kind, threshold)) is not None:
            yield "threshold", why


FIELDS = AlertRuleSerializer.writable()


def parse_rule(data: Any, *, root: str = "$.", from_form: bool = False) -> RuleSpec:
    """A rule from a JSON object (the API) or a form's fields (``from_form``: numbers arrive
    as text, empty fields count as omitted). Raises RuleInputError naming every bad field."""
    return RuleSpec(**validated(AlertRuleSerializer, data, root=root, form=from_form, error=RuleInputError))


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
    return dict(AlertRuleSerializer(rule).data)
