"""The project settings page: API keys, members and roles, the regression webhook.

Owners change everything; members read; viewers and outsiders do not see the page;
every change is a POST that needs the CSRF token.
"""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from manifests import services
from manifests.analysis import notify
from manifests.models import ApiKey, Membership, Project, hash_key
from tests.analysis.support import free_port
from tests.html_page import parse
from tests.support import Receiver

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer(project):
    user = get_user_model().objects.create_user("vera", password="password-vera")
    services.add_member(project=project, user=user, role=Membership.VIEWER)
    return user


def client_for(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def url(project: Project, tail: str = "") -> str:
    return f"/p/{project.slug}/settings/{tail}"


def posts(project: Project, owner_key: ApiKey, membership: Membership) -> list[tuple[str, dict]]:
    return [
        (url(project, "keys"), {"name": "ci", "can_ingest": "on"}),
        (url(project, f"keys/{owner_key.pk}/revoke"), {}),
        (url(project, "members"), {"username": "dave", "role": "member"}),
        (url(project, f"members/{membership.pk}"), {"role": "owner"}),
        (url(project, f"members/{membership.pk}"), {"remove": "1"}),
        (url(project, "webhook"), {"url": "https://hooks.example/x", "threshold_points": "15", "window_calls": "10"}),
        (url(project, "webhook/test"), {}),
    ]


def test_it_shows_the_owner_every_control(project, owner):
    key, _ = services.create_api_key(project=project, name="agent-prod")
    body = client_for(owner).get(url(project)).content.decode()
    assert "agent-prod" in body and key.prefix in body
    for form in ("key-form", "invite-form", "webhook-form", "webhook-test-form"):
        assert f'id="{form}"' in body, form
    assert 'data-nav="settings"' in body


def test_it_shows_a_member_the_settings_read_only(project, member):
    services.create_api_key(project=project, name="agent-prod")
    project.webhook_url, project.webhook_secret = "https://hooks.example/secret-path", "hush"
    project.save()
    r = client_for(member).get(url(project))
    body = r.content.decode()
    assert r.status_code == 200
    assert "agent-prod" in body and "Read only" in body
    assert not parse(body).one("main").select("form"), "a member is offered no control"
    assert "secret-path" not in body and "hush" not in body


def test_it_refuses_every_change_to_a_member_and_a_viewer(project, owner, member, viewer):
    key, _ = services.create_api_key(project=project)
    target = Membership.objects.get(project=project, user=member)
    get_user_model().objects.create_user("dave", password="x")
    for user in (member, viewer):
        c = client_for(user)
        for path, data in posts(project, key, target):
            assert c.post(path, data).status_code == 403, (user, path)
    key.refresh_from_db()
    target.refresh_from_db()
    project.refresh_from_db()
    assert key.is_active and target.role == Membership.MEMBER and project.webhook_url == ""
    assert not Membership.objects.filter(project=project, user__username="dave").exists()
    assert ApiKey.objects.filter(project=project).count() == 1


def test_it_hides_the_settings_from_a_viewer(project, viewer):
    c = client_for(viewer)
    assert c.get(url(project)).status_code == 403
    assert 'data-nav="settings"' not in c.get(f"/p/{project.slug}/").content.decode()


def test_it_answers_404_to_an_outsider_and_changes_nothing(project, owner, member, outsider):
    key, _ = services.create_api_key(project=project)
    target = Membership.objects.get(project=project, user=member)
    c = client_for(outsider)
    assert c.get(url(project)).status_code == 404
    for path, data in posts(project, key, target):
        assert c.post(path, data).status_code == 404, path
    key.refresh_from_db()
    assert key.is_active and Membership.objects.filter(project=project).count() == 2


def test_it_sends_anonymous_users_to_the_login_page(project):
    r = Client().get(url(project))
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")
    assert Client().post(url(project, "keys"), {"name": "x", "can_ingest": "on"}).status_code == 302
    assert not ApiKey.objects.filter(project=project).exists()


def test_it_refuses_a_change_without_the_csrf_token(project, owner):
    c = Client(enforce_csrf_checks=True)
    c.force_login(owner)
    assert c.post(url(project, "keys"), {"name": "x", "can_ingest": "on"}).status_code == 403
    assert not ApiKey.objects.filter(project=project).exists()
    body = c.get(url(project)).content.decode()
    forms = parse(body).select('form[method="post"]')
    assert len(forms) >= 5 and all(f.select('input[name="csrfmiddlewaretoken"]') for f in forms)


def test_it_creates_a_scoped_key_and_shows_it_once(project, owner):
    c = client_for(owner)
    r = c.post(url(project, "keys"), {"name": "reader", "can_read": "on"})
    assert r.status_code == 201
    raw = parse(r.content.decode()).one("#new-key-value").get("value")
    assert raw.startswith("ctx_")
    key = ApiKey.objects.get(project=project, name="reader")
    assert key.hashed == hash_key(raw) and key.can_read and not key.can_ingest
    # The key works on the read API with its scope, and is never shown again.
    assert Client().get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    assert Client().post("/api/v1/manifests", data="[]", content_type="application/json",
                         HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 403
    assert raw not in c.get(url(project)).content.decode()


def test_it_refuses_a_key_without_a_scope(project, owner):
    r = client_for(owner).post(url(project, "keys"), {"name": "nothing"})
    assert r.status_code == 400 and "at least one scope" in r.content.decode()
    assert not ApiKey.objects.filter(project=project).exists()


def test_it_revokes_a_key(project, owner, key):
    stored = ApiKey.objects.get(project=project)
    r = client_for(owner).post(url(project, f"keys/{stored.pk}/revoke"))
    assert r.status_code == 302
    stored.refresh_from_db()
    assert not stored.is_active
    assert Client().get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 401


def test_it_revokes_no_key_of_another_project(project, owner, other_project):
    foreign, _ = services.create_api_key(project=other_project)
    assert client_for(owner).post(url(project, f"keys/{foreign.pk}/revoke")).status_code == 404
    foreign.refresh_from_db()
    assert foreign.is_active


def test_it_invites_an_existing_account_with_a_role(project, owner):
    dave = get_user_model().objects.create_user("dave", password="x")
    c = client_for(owner)
    r = c.post(url(project, "members"), {"username": "dave", "role": "viewer"})
    assert r.status_code == 302
    assert Membership.objects.get(project=project, user=dave).role == Membership.VIEWER
    assert "dave joined the project as viewer" in c.get(url(project)).content.decode()
    assert client_for(dave).get(f"/p/{project.slug}/").status_code == 200


def test_it_names_the_problem_with_an_invitation(project, owner, member):
    c = client_for(owner)
    r = c.post(url(project, "members"), {"username": "nobody", "role": "member"})
    assert r.status_code == 400 and "no account is named" in r.content.decode()
    r = c.post(url(project, "members"), {"username": member.username, "role": "member"})
    assert r.status_code == 400 and "already a member" in r.content.decode()
    r = c.post(url(project, "members"), {"username": "x", "role": "admin"})
    assert r.status_code == 400 and "role" in r.content.decode()


def test_it_changes_a_role_and_removes_a_member(project, owner, member):
    c = client_for(owner)
    m = Membership.objects.get(project=project, user=member)
    assert c.post(url(project, f"members/{m.pk}"), {"role": "viewer"}).status_code == 302
    m.refresh_from_db()
    assert m.role == Membership.VIEWER
    assert c.post(url(project, f"members/{m.pk}"), {"remove": "1"}).status_code == 302
    assert not Membership.objects.filter(pk=m.pk).exists()
    assert client_for(member).get(f"/p/{project.slug}/").status_code == 404


def test_it_keeps_at_least_one_owner(project, owner):
    c = client_for(owner)
    mine = Membership.objects.get(project=project, user=owner)
    r = c.post(url(project, f"members/{mine.pk}"), {"role": "member"})
    assert r.status_code == 400 and "at least one owner" in r.content.decode()
    assert c.post(url(project, f"members/{mine.pk}"), {"remove": "1"}).status_code == 400
    mine.refresh_from_db()
    assert mine.role == Membership.OWNER


def test_it_saves_the_webhook_and_keeps_the_secret_unless_told(project, owner):
    c = client_for(owner)
    data = {"url": "https://hooks.example/ctxview", "secret": "first", "threshold_points": "12.5", "window_calls": "30"}
    assert c.post(url(project, "webhook"), data).status_code == 302
    project.refresh_from_db()
    assert (project.webhook_url, project.webhook_secret, project.regression_threshold_points,
            project.regression_window_calls) == ("https://hooks.example/ctxview", "first", 12.5, 30)
    assert c.post(url(project, "webhook"), {**data, "secret": ""}).status_code == 302
    project.refresh_from_db()
    assert project.webhook_secret == "first"
    r = c.post(url(project, "webhook"), {**data, "secret": "", "new_secret": "on"})
    shown = parse(r.content.decode()).one("#new-secret-value").get("value")
    project.refresh_from_db()
    assert project.webhook_secret == shown != "first"
    assert "first" not in c.get(url(project)).content.decode()


def test_it_refuses_a_bad_webhook_setting_with_the_field_named(project, owner):
    c = client_for(owner)
    for bad, field in (({"url": "ftp://x.example/"}, "url"), ({"threshold_points": "0"}, "threshold_points"),
                       ({"window_calls": "many"}, "window_calls")):
        data = {"url": "https://ok.example/", "threshold_points": "20", "window_calls": "20", **bad}
        r = c.post(url(project, "webhook"), data)
        assert r.status_code == 400, bad
        assert f"{field}:" in r.content.decode(), bad
    project.refresh_from_db()
    assert project.webhook_url == ""


def test_it_sends_a_signed_test_event(project, owner):
    receiver = Receiver()
    try:
        project.webhook_url, project.webhook_secret = receiver.url, "hook-secret"
        project.save()
        c = client_for(owner)
        r = c.post(url(project, "webhook/test"))
        assert r.status_code == 302
        assert "Test event delivered" in c.get(url(project)).content.decode()
        headers, body = receiver.requests[0]
        assert headers["x-ctxview-event"] == "test"
        assert notify.verify("hook-secret", body, headers["x-ctxview-signature"])
        assert json.loads(body)["project"] == project.slug
    finally:
        receiver.close()


def test_it_reports_a_test_event_that_could_not_be_delivered(project, owner):
    project.webhook_url = f"http://127.0.0.1:{free_port()}/nobody-listens"
    project.save()
    c = client_for(owner)
    c.post(url(project, "webhook/test"))
    assert "Test event not delivered: network error" in c.get(url(project)).content.decode()
    receiver = Receiver(statuses=[410])
    try:
        project.webhook_url = receiver.url
        project.save()
        c.post(url(project, "webhook/test"))
        assert "not delivered: the receiver answered HTTP 410" in c.get(url(project)).content.decode()
    finally:
        receiver.close()


def test_it_takes_the_forms_limits_from_the_serializers(project, owner):
    from manifests import alerts, facts, forms

    body = client_for(owner).get(url(project)).content.decode()
    rule, fact, hook = (s().fields for s in (alerts.AlertRuleSerializer, facts.WatchedFactSerializer,
                                             forms.WebhookSerializer))
    assert f'id="alert-window" min="1" max="{rule["window_hours"].max_value}"' in body
    assert f'id="alert-agent" maxlength="{rule["agent"].max_length}"' in body
    assert f'id="fact-label" maxlength="{fact["label"].max_length}"' in body
    assert f'id="fact-text" rows="2" maxlength="{fact["text"].max_length}"' in body
    assert f'name="url" value="" maxlength="{hook["url"].max_length}"' in body
    assert f'min="{hook["window_calls"].min_value}" max="{hook["window_calls"].max_value}"' in body


def test_it_takes_a_webhook_host_without_a_scheme_as_https(project, owner):
    data = {"url": "hooks.example/ctxview", "threshold_points": "20", "window_calls": "20"}
    assert client_for(owner).post(url(project, "webhook"), data).status_code == 302
    project.refresh_from_db()
    assert project.webhook_url == "https://hooks.example/ctxview"


def test_it_names_each_button_with_the_words_it_shows(project, owner, member):
    # A voice user says what they see ("click Delete"): a button's accessible name holds its
    # visible text (WCAG 2.5.3), for every labelled button of every list on the page.
    from manifests import alerts, facts

    services.create_api_key(project=project, name="agent-prod")
    facts.create_fact(project=project, spec=facts.parse_fact({"label": "refund rate", "text": "0.0321"}))
    alerts.create_rule(project=project, spec=alerts.parse_rule({"kind": "hit_rate_below", "threshold": 0.5}))
    page = parse(client_for(owner).get(url(project)).content)
    labelled = [b for b in page.select("button") if b.get("aria-label")]
    assert {b.text for b in labelled} >= {"Revoke", "Remove", "Delete"}
    assert [(b.text, b.get("aria-label")) for b in labelled
            if b.text.lower() not in (b.get("aria-label") or "").lower()] == []
