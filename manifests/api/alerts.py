"""The alert rules of the key's project (docs/api.md, "Alert rules"): list, create, read,
delete. Validation and writes are manifests/alerts/'s, shared with the settings page."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from manifests import alerts
from manifests.api.auth import HasConfigureScope, key_of
from manifests.models import AlertRule

_rule_list = inline_serializer("AlertRuleList", {"results": alerts.AlertRuleSerializer(many=True)})


def _invalid(exc: alerts.RuleInputError) -> Response:
    errors = [{"path": e.path, "message": e.message} for e in exc.errors]
    return Response({"error": errors[0]["message"], "errors": errors}, status=status.HTTP_400_BAD_REQUEST)


class AlertRuleListView(APIView):
    permission_classes = [HasConfigureScope]

    @extend_schema(summary="The alert rules of the key's project, with their state", responses={200: _rule_list},
                   operation_id="alert_rules_list")
    def get(self, request: Request) -> Response:
        return Response({"results": [alerts.as_dict(r) for r in alerts.rules_of(key_of(request).project)]})

    @extend_schema(summary="Create an alert rule (key with the configure scope)", request=alerts.AlertRuleSerializer,
                   responses={201: alerts.AlertRuleSerializer})
    def post(self, request: Request) -> Response:
        try:
            rule = alerts.create_rule(project=key_of(request).project, spec=alerts.parse_rule(request.data))
        except alerts.RuleInputError as exc:
            return _invalid(exc)
        return Response(alerts.as_dict(rule), status=status.HTTP_201_CREATED)


class AlertRuleDetailView(APIView):
    permission_classes = [HasConfigureScope]

    def rule_of(self, request: Request, rule_id: int) -> AlertRule:
        rule = AlertRule.objects.filter(project=key_of(request).project, pk=rule_id).first()
        if rule is None:
            raise NotFound("no such alert rule in the key's project")
        return rule

    @extend_schema(summary="One alert rule with its state", responses={200: alerts.AlertRuleSerializer},
                   operation_id="alert_rule_retrieve")
    def get(self, request: Request, rule_id: int) -> Response:
        return Response(alerts.as_dict(self.rule_of(request, rule_id)))

    @extend_schema(summary="Delete an alert rule (key with the configure scope)", responses={204: None})
    def delete(self, request: Request, rule_id: int) -> Response:
        if not alerts.delete_rule(project=key_of(request).project, rule_id=self.rule_of(request, rule_id).pk):
            raise NotFound("no such alert rule in the key's project")
        return Response(status=status.HTTP_204_NO_CONTENT)

