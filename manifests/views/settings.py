"""Project settings: API keys, members and roles, the regression webhook, alert rules, watched facts.

Owners change everything; members see the page read-only; viewers and outsiders do
not see it (403 and 404). Every change is a CSRF-protected POST, checked here and
written by a service.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from manifests import alerts, facts, forms, services
from manifests.analysis import notify
from manifests.models import AlertRule, ApiKey, Membership, Project, WatchedFact
from manifests.selectors.facts import facts_of
from manifests.selectors.projects import project_for, project_settings
from manifests.views.common import nav

Handler = Callable[..., HttpResponse]


def _forbidden(request: HttpRequest, project: Project, message: str) -> HttpResponse:
    return render(request, "manifests/forbidden.html", {"project": project, **nav("settings"), "message": message},
                  status=403)


def settings_access(*, owner_only: bool) -> Callable[[Handler], Handler]:
    def decorate(view: Handler) -> Handler:
        @login_required
        @wraps(view)
        def wrapper(request: HttpRequest, slug: str, *args: Any, **kwargs: Any) -> HttpResponse:
            project = project_for(request.user, slug)  # 404 for outsiders
            if project.role == Membership.VIEWER or (owner_only and project.role != Membership.OWNER):
                return _forbidden(request, project, "Only the project's owners change its settings."
                                  if project.role == Membership.MEMBER else
                                  "Viewers see the dashboard; the settings are for owners and members.")
            return view(request, project, *args, **kwargs)

        return wrapper

    return decorate


def _page(request: HttpRequest, project: Project, *, status: int = 200, **context: Any) -> HttpResponse:
    base = {
        "project": project,
        **nav("settings"),
        "is_owner": project.role == Membership.OWNER,
        "roles": Membership.ROLES,
        "key_form": forms.ApiKeyForm(),
        "invite_form": forms.InviteForm(),
        "webhook_input": {"url": project.webhook_url, "threshold_points": project.regression_threshold_points,
                          "window_calls": project.regression_window_calls},
        "webhook_fields": forms.WebhookSerializer().fields,
        "alert_kinds": AlertRule.KINDS,
        "alert_formats": AlertRule.FORMATS,
        "alert_input": {},
        # The forms' limits (maxlength, max) are the serializers'.
        "alert_fields": alerts.AlertRuleSerializer().fields,
        "alert_rules": [(rule, alerts.describe(rule), alerts.figure(rule, rule.last_value))
                        for rule in alerts.rules_of(project)],
        "fact_input": {},
        "fact_fields": facts.WatchedFactSerializer().fields,
        "watched_facts": facts_of(project),
        **project_settings(project),
    }
    return render(request, "manifests/settings.html", {**base, **context}, status=status)


def _back(project: Project, anchor: str) -> HttpResponse:
    return redirect(reverse("project-settings", args=[project.slug]) + f"#{anchor}")


@require_GET
@settings_access(owner_only=False)
def project_settings_page(request: HttpRequest, project: Project) -> HttpResponse:
    return _page(request, project)


@require_POST
@settings_access(owner_only=True)
def create_key(request: HttpRequest, project: Project) -> HttpResponse:
    form = forms.ApiKeyForm(request.POST)
    if not form.is_valid():
        return _page(request, project, key_form=form, status=400)
    key, raw = services.create_api_key(project=project, name=form.cleaned_data["name"],
                                       can_ingest=form.cleaned_data["can_ingest"],
                                       can_read=form.cleaned_data["can_read"],
                                       can_configure=form.cleaned_data["can_configure"])
    # Rendered, not redirected: the raw key exists only in this response and is never stored.
    return _page(request, project, new_key=key, new_key_raw=raw, status=201)


@require_POST
@settings_access(owner_only=True)
def revoke_key(request: HttpRequest, project: Project, key_id: int) -> HttpResponse:
    key = get_object_or_404(ApiKey, project=project, pk=key_id)
    services.revoke_api_key(key=key)
    messages.success(request, f"Key {key.prefix}… ({key.name}) is revoked: requests with it now get 401.")
    return _back(project, "keys")


@require_POST
@settings_access(owner_only=True)
def invite_member(request: HttpRequest, project: Project) -> HttpResponse:
    form = forms.InviteForm(request.POST)
    if form.is_valid():
        try:
            m = services.invite_member(project=project, username=form.cleaned_data["username"],
                                       role=form.cleaned_data["role"])
        except services.SettingsError as exc:
            form.add_error(exc.field, exc.message)
        else:
            messages.success(request, f"{m.user.username} joined the project as {m.get_role_display().lower()}.")
            return _back(project, "members")
    return _page(request, project, invite_form=form, status=400)


@require_POST
@settings_access(owner_only=True)
def change_member(request: HttpRequest, project: Project, membership_id: int) -> HttpResponse:
    get_object_or_404(Membership, project=project, pk=membership_id)
    if request.POST.get("remove"):
        try:
            m = services.remove_member(project=project, membership_id=membership_id)
        except services.SettingsError as exc:
            return _page(request, project, member_error=exc.message, status=400)
        messages.success(request, f"{m.user.username} no longer has access to the project.")
        return _back(project, "members")
    form = forms.RoleForm(request.POST)
    if not form.is_valid():
        errors = map(str, form.errors.get("role", ["bad role"]))
        return _page(request, project, member_error="; ".join(errors), status=400)
    try:
        m = services.set_member_role(project=project, membership_id=membership_id, role=form.cleaned_data["role"])
    except services.SettingsError as exc:
        return _page(request, project, member_error=exc.message, status=400)
    messages.success(request, f"{m.user.username} is now {m.get_role_display().lower()}.")
    return _back(project, "members")


@require_POST
@settings_access(owner_only=True)
def configure_webhook(request: HttpRequest, project: Project) -> HttpResponse:
    data = {name: request.POST.get(name, "") for name in forms.WEBHOOK_FIELDS}
    try:
        hook = forms.parse_webhook(data)
    except forms.WebhookInputError as exc:
        return _page(request, project, webhook_errors=exc.errors, webhook_input=data, status=400)
    generated = services.new_webhook_secret() if hook["new_secret"] else None
    secret = generated or hook["secret"] or None
    services.configure_webhook(project=project, url=hook["url"], secret=secret,
                               threshold_points=hook["threshold_points"], window_calls=hook["window_calls"])
    if generated:
        # Like a new API key: shown in this response only.
        return _page(request, project, new_secret=generated)
    messages.success(request, "Webhook settings saved.")
    return _back(project, "webhook")


@require_POST
@settings_access(owner_only=True)
def test_webhook(request: HttpRequest, project: Project) -> HttpResponse:
    ok, what = notify.send_test(project)
    (messages.success if ok else messages.error)(
        request, f"Test event {'delivered' if ok else 'not delivered'}: {what}.")
    return _back(project, "webhook")


@require_POST
@settings_access(owner_only=True)
def create_alert_rule(request: HttpRequest, project: Project) -> HttpResponse:
    data = {name: request.POST.get(name, "") for name in alerts.rules.FIELDS}
    try:
        rule = alerts.create_rule(project=project, spec=alerts.parse_rule(data, root="", from_form=True))
    except alerts.RuleInputError as exc:
        return _page(request, project, alert_errors=exc.errors, alert_input=data, status=400)
    messages.success(request, f"Alert rule added: {alerts.describe(rule)}.")
    return _back(project, "alerts")


@require_POST
@settings_access(owner_only=True)
def delete_alert_rule(request: HttpRequest, project: Project, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(AlertRule, project=project, pk=rule_id)
    alerts.delete_rule(project=project, rule_id=rule.pk)
    messages.success(request, f"Alert rule deleted: {alerts.describe(rule)}.")
    return _back(project, "alerts")


@require_POST
@settings_access(owner_only=True)
def create_watched_fact(request: HttpRequest, project: Project) -> HttpResponse:
    data = {name: request.POST.get(name, "") for name in facts.FIELDS}
    try:
        fact = facts.create_fact(project=project, spec=facts.parse_fact(data, root="", from_form=True))
    except facts.FactInputError as exc:
        return _page(request, project, fact_errors=exc.errors, fact_input=data, status=400)
    messages.success(request, f"Watching the fact {fact.label!r}: calls analysed from now on are checked for it.")
    return _back(project, "watched-facts")


@require_POST
@settings_access(owner_only=True)
def delete_watched_fact(request: HttpRequest, project: Project, fact_id: int) -> HttpResponse:
    fact = get_object_or_404(WatchedFact, project=project, pk=fact_id)
    facts.delete_fact(project=project, fact_id=fact.pk)
    messages.success(request, f"No longer watching the fact {fact.label!r}.")
    return _back(project, "watched-facts")
