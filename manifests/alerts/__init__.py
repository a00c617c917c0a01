"""Alert rules (docs/dashboard.md, "Alert rules"): per project, a condition over the
recent rollups (hit rate, compaction invariant failures, lost evidence, cost per verified
success) that fires once when it starts to hold and once when it resolves.

``rules`` states what a rule may say (one serializer, for the settings page and the API)
and writes rules, ``measure`` reads their figures, ``evaluate`` records each change of state
as an event, ``deliver`` sends an event to the project's webhook as JSON, Slack or Discord. The beat task in
manifests/tasks.py runs :func:`evaluate_all` and enqueues the deliveries.
"""

from manifests.alerts.deliver import body_for, format_for, pending, send, to_deliver
from manifests.alerts.evaluate import describe, evaluate_all, evaluate_rule, figure
from manifests.alerts.measure import Measurement, measure, window_start
from manifests.alerts.rules import (
    AlertRuleSerializer,
    RuleInputError,
    RuleSpec,
    as_dict,
    create_rule,
    delete_rule,
    parse_rule,
    rules_of,
)
from manifests.inputs import FieldError

__all__ = [
    "AlertRuleSerializer", "FieldError", "Measurement", "RuleInputError", "RuleSpec", "as_dict", "body_for",
    "create_rule", "delete_rule", "describe", "evaluate_all", "evaluate_rule", "figure", "format_for", "measure",
    "parse_rule", "pending", "rules_of", "send", "to_deliver", "window_start",
]
