"""Forms of the project settings page: they parse and validate input; the writes are in services.py.
The webhook's settings are a configurable resource, stated once as a serializer like alert rules
and watched facts (manifests/inputs.py)."""

from __future__ import annotations

from typing import Any

from django import forms

from manifests.inputs import Flag, InputError, InputSerializer, Number, Text, Url, Whole, validated
from manifests.models import Membership, Project


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=200, initial="default", help_text="What the key is for, e.g. the agent's name")
    can_ingest = forms.BooleanField(required=False, initial=True, label="ingest (send manifests)")
    can_read = forms.BooleanField(required=False, label="read (the read API)")
    can_configure = forms.BooleanField(required=False,
                                       label="configure (alert rules and watched facts through the API)")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not (data.get("can_ingest") or data.get("can_read") or data.get("can_configure")):
            raise forms.ValidationError("give the key at least one scope: ingest, read or configure")
        return data


class InviteForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.ROLES, initial=Membership.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.ROLES)


class WebhookInputError(InputError):
    """Bad webhook settings; ``errors`` name each bad field."""


MAX_URL = Project._meta.get_field("webhook_url").max_length or 500
MAX_SECRET = Project._meta.get_field("webhook_secret").max_length or 200
MIN_POINTS, MAX_POINTS = 1, 100
MIN_CALLS, MAX_CALLS = 2, 10_000


class WebhookSerializer(InputSerializer):
    """The cache-hit regression webhook of a project, as its settings form sends it."""

    noun = "webhook"

    url = Url(default="", allow_blank=True, max_length=MAX_URL,
              help_text="Receives a signed JSON POST per cache-hit regression; empty turns alerts off",
              says=f"must be an http or https URL of at most {MAX_URL} characters (empty: no webhook)")
    secret = Text(default="", allow_blank=True, write_only=True, max_length=MAX_SECRET,
                  help_text="Leave empty to keep the current secret",
                  says=f"must be text of at most {MAX_SECRET} characters without control characters")
    new_secret = Flag(default=False, help_text="Generate a new secret (shown once)")
    threshold_points = Number(min_value=MIN_POINTS, max_value=MAX_POINTS,
                              help_text="A drop of more than this against the baseline is a regression",
                              says=f"must be a number of hit-rate points, {MIN_POINTS} to {MAX_POINTS}")
    window_calls = Whole(min_value=MIN_CALLS, max_value=MAX_CALLS,
                         help_text="Calls in the rolling window and in the baseline before it",
                         says=f"must be a whole number of calls, {MIN_CALLS} to {MAX_CALLS}")


WEBHOOK_FIELDS = WebhookSerializer.writable()


def parse_webhook(data: Any) -> dict[str, Any]:
    """The webhook settings of the form's fields; raises WebhookInputError naming every bad field."""
    return validated(WebhookSerializer, data, root="", form=True, error=WebhookInputError)
