"""Forms of the project settings page: they parse and validate input; the writes are in services.py."""

from __future__ import annotations

from django import forms

from manifests.models import Membership


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=200, initial="default", help_text="What the key is for, e.g. the agent's name")
    can_ingest = forms.BooleanField(required=False, initial=True, label="ingest (send manifests)")
    can_read = forms.BooleanField(required=False, label="read (the read API)")
    can_configure = forms.BooleanField(required=False,
                                       label="configure (alert rules and watched facts through the API)")

    def clean(self):
        data = super().clean()
        if not (data.get("can_ingest") or data.get("can_read") or data.get("can_configure")):
            raise forms.ValidationError("give the key at least one scope: ingest, read or configure")
        return data


class InviteForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.ROLES, initial=Membership.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.ROLES)


class WebhookForm(forms.Form):
    url = forms.URLField(max_length=500, required=False, assume_scheme="https", label="Webhook URL",
                         help_text="Receives a signed JSON POST per cache-hit regression; empty turns alerts off")
    secret = forms.CharField(max_length=200, required=False, widget=forms.PasswordInput(render_value=False),
                             label="Signing secret", help_text="Leave empty to keep the current secret")
    new_secret = forms.BooleanField(required=False, label="generate a new secret (shown once)")
    threshold_points = forms.FloatField(min_value=1, max_value=100, label="Threshold (hit-rate points)",
                                        help_text="A drop of more than this against the baseline is a regression")
    window_calls = forms.IntegerField(min_value=2, max_value=10_000, label="Window (calls)",
                                      help_text="Calls in the rolling window and in the baseline before it")

    def clean_url(self):
        url = self.cleaned_data["url"]
        if url and not url.lower().startswith(("http://", "https://")):
            raise forms.ValidationError("the webhook must be an http or https URL")
        return url
