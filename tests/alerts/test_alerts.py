"""Alert rules: each kind fires once when its condition starts to hold and once when it
resolves, delivered to a real HTTP receiver; reruns send nothing twice; Slack and Discord
messages have their incoming webhooks' shape; the settings page and the API manage rules
per role and scope.

Data goes through the real ingest and the analysis task (tests/support.py: store_and_analyse);
the rollups the rules read are refreshed by that analysis (interval 0 without a broker).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Sum
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from ctxview.celery import app as celery_app
from manifests import alerts, services, tasks
from manifests.analysis import notify
from manifests.models import AlertEvent, AlertRule, Call, CallFigures, Membership
from tests.support import Receiver, manifest, store_and_analyse

pytestmark = pytest.mark.django_db

SECRET = "alert-secret"


@pytest.fixture
def receiver(project) -> Iterator[Receiver]:
    r = Receiver()
    project.webhook_url, project.webhook_secret = r.url, SECRET
    project.save()
    yield r
    r.close()


def recent(call_id: str, minutes_ago: float = 5, **extra: Any) -> dict:
    at = (timezone.now() - timedelta(minutes=minutes_ago)).isoformat()
    return manifest(call_id, run_id=f"run-{call_id}", started_at=at, **extra)


def quiet(call_id: str, **extra: Any) -> dict:
    """A call with no evidence, no compaction and a verified success."""
    return recent(call_id, evidence=[], compactions=[], **extra)


def rule(project, **fields: Any) -> AlertRule:
    return alerts.create_rule(project=project, spec=alerts.parse_rule(fields))


def events(r: AlertRule) -> list[tuple[int, str]]:
    return list(AlertEvent.objects.filter(rule=r).order_by("pk").values_list("episode", "transition"))


def evaluate_and_deliver(now=None) -> list[int]:
    """The beat task's work at a chosen time: evaluate, then the delivery task per event."""
    new = alerts.evaluate_all(now=now)
    for pk in new:
        tasks.notify_alert(pk)
    return new


def alert_bodies(receiver: Receiver) -> list[dict]:
    return [b["alert"] for b in receiver.bodies()]


def test_it_fires_and_resolves_a_hit_rate_rule_once_each(project, receiver):
    r = rule(project, kind="hit_rate_below", threshold=0.5, agent="researcher", window_hours=1)
    store_and_analyse(project, [quiet(f"low-{n}") for n in range(3)])  # 700 of 2000 input tokens cached
    assert len(evaluate_and_deliver()) == 1
    assert evaluate_and_deliver() == []  # the rerun changes nothing and sends nothing
    ((headers, raw),) = receiver.requests
    assert notify.verify(SECRET, raw, headers["x-ctxview-signature"]) and headers["x-ctxview-event"] == "alert"
    fired = json.loads(raw)["alert"]
    assert (fired["state"], fired["rule_id"], fired["episode"]) == ("firing", r.pk, 1)
    assert fired["value"] == pytest.approx(0.35) and fired["kind"] == "hit_rate_below"

    high = {"input_tokens": 2000, "cache_read_tokens": 1990, "cache_write_tokens": 0, "output_tokens": 10}
    store_and_analyse(project, [quiet(f"high-{n}", usage=high) for n in range(12)])
    assert len(evaluate_and_deliver()) == 1
    assert evaluate_and_deliver() == []
    resolved = alert_bodies(receiver)[1]
    assert (resolved["state"], resolved["episode"]) == ("resolved", 1)
    assert resolved["value"] == pytest.approx((3 * 700 + 12 * 1990) / (15 * 2000))
    assert len(receiver.requests) == 2 and events(r) == [(1, "firing"), (1, "resolved")]
    r.refresh_from_db()
    assert not r.firing and r.episode == 1


def test_it_keeps_a_hit_rate_rule_to_its_agent(project, receiver):
    rule(project, kind="hit_rate_below", threshold=0.5, agent="someone-else")
    store_and_analyse(project, [quiet("low-0")])
    assert tasks.evaluate_alert_rules() == 0 and receiver.requests == []


def test_it_fires_on_invariant_failures_and_resolves_when_they_leave_the_window(project, receiver):
    r = rule(project, kind="invariant_failures")  # default threshold 0: any failure
    assert r.threshold == 0
    store_and_analyse(project, [recent("compacted-1")])  # a summary that lost the user's constraint
    assert evaluate_and_deliver() != []
    assert evaluate_and_deliver() == []
    later = timezone.now() + timedelta(hours=3)
    assert evaluate_and_deliver(later) != []
    assert evaluate_and_deliver(later) == []
    assert [(a["state"], a["value"]) for a in alert_bodies(receiver)] == [("firing", 1.0), ("resolved", 0.0)]
    assert events(r) == [(1, "firing"), (1, "resolved")]


def test_it_fires_when_a_watched_evidence_key_is_lost_more_than_n_times(project, receiver):
    watched = rule(project, kind="evidence_lost", evidence_key="rate-limit", threshold=1)
    other_key = rule(project, kind="evidence_lost", evidence_key="another-fact")
    store_and_analyse(project, [recent("lost-1")])  # evidence rate-limit: present false, once
    assert evaluate_and_deliver() == []
    store_and_analyse(project, [recent("lost-2")])
    assert evaluate_and_deliver() != []
    assert evaluate_and_deliver() == []
    assert evaluate_and_deliver(timezone.now() + timedelta(hours=3)) != []
    assert [(a["state"], a["rule_id"], a["value"]) for a in alert_bodies(receiver)] == [
        ("firing", watched.pk, 2.0), ("resolved", watched.pk, 0.0)]
    assert events(other_key) == []


def test_it_fires_when_any_required_evidence_is_lost_read_from_the_rollups(project, receiver):
    r = rule(project, kind="evidence_lost")
    store_and_analyse(project, [recent("lost-1"), quiet("fine-1")])
    assert evaluate_and_deliver() != [] and evaluate_and_deliver() == []
    assert evaluate_and_deliver(timezone.now() + timedelta(hours=3)) != []
    assert [a["state"] for a in alert_bodies(receiver)] == ["firing", "resolved"]
    assert events(r) == [(1, "firing"), (1, "resolved")]


def test_it_fires_on_cost_per_verified_success_and_resolves_when_it_falls(project, receiver):
    r = rule(project, kind="cost_per_success_above", threshold=1.0)
    store_and_analyse(project, [quiet("costly-1"), quiet("failed-1", outcome={"status": "ok", "verified": "no"})])
    assert evaluate_and_deliver() != [] and evaluate_and_deliver() == []
    figures = CallFigures.objects.filter(project=project)
    cost = figures.aggregate(c=Sum("cost"))["c"]
    assert alert_bodies(receiver)[0]["value"] == pytest.approx(cost / 1)  # both calls' cost, one success

    cheap = {"input_tokens": 10, "cache_read_tokens": 0, "cache_write_tokens": 0, "output_tokens": 1}
    store_and_analyse(project, [quiet(f"cheap-{n}", usage=cheap) for n in range(19)])
    assert evaluate_and_deliver() != [] and evaluate_and_deliver() == []
    resolved = alert_bodies(receiver)[1]
    successes = Call.objects.filter(project=project, verified="yes").count()
    assert resolved["state"] == "resolved" and successes == 20
    assert resolved["value"] == pytest.approx(figures.aggregate(c=Sum("cost"))["c"] / successes)
    assert resolved["value"] < 1.0
    assert events(r) == [(1, "firing"), (1, "resolved")]


def test_it_starts_a_new_episode_when_a_resolved_rule_holds_again(project, receiver):
    r = rule(project, kind="invariant_failures")
    store_and_analyse(project, [recent("compacted-1")])
    evaluate_and_deliver()
    evaluate_and_deliver(timezone.now() + timedelta(hours=3))
    store_and_analyse(project, [recent("compacted-2", minutes_ago=-175)])  # within the window three hours on
    evaluate_and_deliver(timezone.now() + timedelta(hours=3))
    assert events(r) == [(1, "firing"), (1, "resolved"), (2, "firing")]
    assert [a["episode"] for a in alert_bodies(receiver)] == [1, 1, 2]


def check_slack_message(message: dict) -> None:
    """The shape Slack's incoming webhooks accept: a text string, and blocks of type
    section (mrkdwn text under 3000 characters) or context (mrkdwn elements)."""
    assert isinstance(message["text"], str) and message["text"].strip()
    assert isinstance(message["blocks"], list) and 1 <= len(message["blocks"]) <= 50
    for block in message["blocks"]:
        assert block["type"] in ("section", "context"), block
        texts = [block["text"]] if block["type"] == "section" else block["elements"]
        assert 1 <= len(texts) <= 10
        for text in texts:
            assert set(text) == {"type", "text"} and text["type"] == "mrkdwn"
            assert isinstance(text["text"], str) and 0 < len(text["text"]) < 3000
            assert "<" not in text["text"].replace("&lt;", "")  # no stray link or mention syntax


def test_it_sends_a_slack_message_that_slacks_incoming_webhook_accepts(project, receiver):
    project.name = "Alpha <prod> & co"
    project.save()
    rule(project, kind="invariant_failures", format="slack")
    store_and_analyse(project, [recent("compacted-1")])
    evaluate_and_deliver()
    evaluate_and_deliver(timezone.now() + timedelta(hours=3))
    firing, resolved = receiver.bodies()
    for message in (firing, resolved):
        check_slack_message(message)
    assert "Firing" in firing["blocks"][0]["text"]["text"] and "Resolved" in resolved["blocks"][0]["text"]["text"]
    assert "Alpha &lt;prod&gt; &amp; co" in firing["blocks"][0]["text"]["text"]


def test_it_sends_a_discord_message_with_content_and_an_embed(project, receiver):
    rule(project, kind="invariant_failures", format="discord")
    store_and_analyse(project, [recent("compacted-1")])
    evaluate_and_deliver()
    (message,) = receiver.bodies()
    assert isinstance(message["content"], str) and 0 < len(message["content"]) <= 2000
    (embed,) = message["embeds"]
    assert embed["title"].startswith("Firing") and len(embed["title"]) <= 256
    assert isinstance(embed["color"], int) and embed["description"]
    assert all(set(f) == {"name", "value", "inline"} and f["value"] for f in embed["fields"])


def test_it_picks_the_message_format_by_the_webhook_host_when_auto():
    assert alerts.format_for("auto", "https://hooks.slack.com/services/T0/B0/x") == "slack"
    assert alerts.format_for("auto", "https://discord.com/api/webhooks/1/abc") == "discord"
    assert alerts.format_for("auto", "https://discord.com/channels/1") == "json"
    assert alerts.format_for("auto", "https://hooks.slack.com.evil.example/x") == "json"
    assert alerts.format_for("auto", "http://127.0.0.1:9/hook") == "json"
    assert alerts.format_for("slack", "http://127.0.0.1:9/hook") == "slack"


def test_it_records_the_state_without_a_webhook_and_sends_it_never(project):
    r = rule(project, kind="invariant_failures")
    store_and_analyse(project, [recent("compacted-1")])
    (event_id,) = evaluate_and_deliver()
    event = AlertEvent.objects.get(pk=event_id)
    assert event.notified_at is None and "no webhook" in event.notify_error
    assert alerts.pending(now=timezone.now() + timedelta(hours=1)) == []
    r.refresh_from_db()
    assert r.firing and r.last_value == 1


def test_it_schedules_the_evaluation_on_the_beat():
    entry = celery_app.conf.beat_schedule["evaluate-alert-rules"]
    assert entry["task"] == "manifests.tasks.evaluate_alert_rules"
    assert entry["task"] in celery_app.tasks and entry["schedule"] > 0


# --------------------------------------------------------------------------- #
# The settings page


def page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def settings_url(project, tail: str = "") -> str:
    return f"/p/{project.slug}/settings/{tail}"


FORM = {"kind": "hit_rate_below", "threshold": "0.4", "window_hours": "2", "agent": "researcher", "model": "",
        "evidence_key": "", "format": "auto"}


def test_it_lets_the_owner_add_and_delete_a_rule_on_the_settings_page(project, owner):
    c = page(owner)
    r = c.post(settings_url(project, "alerts"), FORM)
    assert r.status_code == 302 and r["Location"].endswith("#alerts")
    created = AlertRule.objects.get(project=project)
    assert (created.kind, created.threshold, created.window_hours, created.agent) == ("hit_rate_below", 0.4, 2,
                                                                                     "researcher")
    body = c.get(settings_url(project)).content.decode()
    assert f'data-alert-rule="{created.pk}"' in body and 'id="alert-form"' in body
    assert "cache hit rate below 40.0% over 2 h, agent researcher" in body
    r = c.post(settings_url(project, f"alerts/{created.pk}/delete"))
    assert r.status_code == 302 and not AlertRule.objects.filter(project=project).exists()


def test_it_names_the_bad_field_of_a_rule_on_the_settings_page(project, owner):
    r = page(owner).post(settings_url(project, "alerts"), {**FORM, "threshold": "1.5", "window_hours": "0"})
    body = r.content.decode()
    assert r.status_code == 400 and 'id="alert-errors"' in body
    assert "threshold: must be a hit rate between 0 and 1" in body and "window_hours: must be a whole number" in body
    assert not AlertRule.objects.exists()


def test_it_shows_a_member_the_rules_and_refuses_their_changes(project, owner, member):
    existing = rule(project, kind="invariant_failures")
    c = page(member)
    body = c.get(settings_url(project)).content.decode()
    assert f'data-alert-rule="{existing.pk}"' in body and 'id="alert-form"' not in body
    assert c.post(settings_url(project, "alerts"), FORM).status_code == 403
    assert c.post(settings_url(project, f"alerts/{existing.pk}/delete")).status_code == 403
    assert list(AlertRule.objects.values_list("pk", flat=True)) == [existing.pk]


def test_it_refuses_a_viewer_and_hides_the_rules_from_an_outsider(project, outsider):
    viewer = get_user_model().objects.create_user("vera", password="password-vera")
    services.add_member(project=project, user=viewer, role=Membership.VIEWER)
    existing = rule(project, kind="invariant_failures")
    assert page(viewer).post(settings_url(project, "alerts"), FORM).status_code == 403
    c = page(outsider)
    assert c.post(settings_url(project, "alerts"), FORM).status_code == 404
    assert c.post(settings_url(project, f"alerts/{existing.pk}/delete")).status_code == 404
    assert list(AlertRule.objects.values_list("pk", flat=True)) == [existing.pk]


def test_it_deletes_no_rule_of_another_project_from_the_settings_page(project, owner, other_project):
    theirs = rule(other_project, kind="invariant_failures")
    assert page(owner).post(settings_url(project, f"alerts/{theirs.pk}/delete")).status_code == 404
    assert AlertRule.objects.filter(pk=theirs.pk).exists()


def test_it_offers_the_configure_scope_when_creating_a_key(project, owner):
    r = page(owner).post(settings_url(project, "keys"), {"name": "ops", "can_configure": "on"})
    assert r.status_code == 201
    key = project.api_keys.get(name="ops")
    assert (key.can_configure, key.can_ingest, key.can_read) == (True, False, False)


# --------------------------------------------------------------------------- #
# The API


def client(raw_key: str | None) -> APIClient:
    c = APIClient()
    if raw_key:
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return c


@pytest.fixture
def configure_key(project) -> str:
    return services.create_api_key(project=project, name="ops", can_ingest=False, can_configure=True)[1]


def test_it_creates_lists_reads_and_deletes_rules_with_a_configure_key(project, configure_key):
    c = client(configure_key)
    r = c.post("/api/v1/alert-rules", {"kind": "evidence_lost", "evidence_key": "rate-limit", "threshold": 2,
                                       "window_hours": 6, "format": "slack"}, format="json")
    assert r.status_code == 201, r.content
    created = r.json()
    assert (created["kind"], created["evidence_key"], created["threshold"], created["format"]) == (
        "evidence_lost", "rate-limit", 2.0, "slack")
    assert created["state"] == {"firing": False, "episode": 0, "changed_at": None, "last_value": None,
                                "evaluated_at": None}
    assert [x["id"] for x in c.get("/api/v1/alert-rules").json()["results"]] == [created["id"]]
    assert c.get(f"/api/v1/alert-rules/{created['id']}").json() == created
    assert c.delete(f"/api/v1/alert-rules/{created['id']}").status_code == 204
    assert c.get(f"/api/v1/alert-rules/{created['id']}").status_code == 404
    assert not AlertRule.objects.exists()


def test_it_lets_a_read_key_list_rules_but_not_change_them(project, key):
    existing = rule(project, kind="invariant_failures")
    c = client(key)  # ingest and read scopes
    assert c.get("/api/v1/alert-rules").status_code == 200
    assert c.post("/api/v1/alert-rules", {"kind": "invariant_failures"}, format="json").status_code == 403
    assert c.delete(f"/api/v1/alert-rules/{existing.pk}").status_code == 403
    ingest_only = services.create_api_key(project=project, can_ingest=True, can_read=False)[1]
    assert client(ingest_only).get("/api/v1/alert-rules").status_code == 403
    assert client(None).get("/api/v1/alert-rules").status_code == 401
    assert client("ctx_not-a-key").post("/api/v1/alert-rules", {}, format="json").status_code == 401
    assert AlertRule.objects.count() == 1


def test_it_never_shows_or_deletes_another_projects_rule(project, other_project, configure_key):
    theirs = rule(other_project, kind="invariant_failures")
    c = client(configure_key)
    assert c.get(f"/api/v1/alert-rules/{theirs.pk}").status_code == 404
    assert c.delete(f"/api/v1/alert-rules/{theirs.pk}").status_code == 404
    assert c.get("/api/v1/alert-rules").json()["results"] == []
    assert AlertRule.objects.filter(pk=theirs.pk).exists()


@pytest.mark.parametrize(("body", "paths"), [
    ({"kind": "nope"}, {"$.kind"}),
    ({"kind": "hit_rate_below"}, {"$.threshold"}),
    ({"kind": "hit_rate_below", "threshold": 1.5}, {"$.threshold"}),
    ({"kind": "hit_rate_below", "threshold": "0.5"}, {"$.threshold"}),
    ({"kind": "invariant_failures", "threshold": 1.5, "window_hours": 0}, {"$.threshold", "$.window_hours"}),
    ({"kind": "invariant_failures", "evidence_key": "x"}, {"$.evidence_key"}),
    ({"kind": "cost_per_success_above", "threshold": 0, "format": "teams"}, {"$.threshold", "$.format"}),
    ({"kind": "invariant_failures", "agent": "a\x00b", "colour": "red"}, {"$.agent", "$.colour"}),
    ([1, 2], {"$"}),
])
def test_it_answers_bad_input_with_400_naming_each_field(project, configure_key, body, paths):
    r = client(configure_key).post("/api/v1/alert-rules", body, format="json")
    assert r.status_code == 400, r.content
    assert {e["path"] for e in r.json()["errors"]} == paths and r.json()["error"]
    assert not AlertRule.objects.exists()


def test_it_answers_a_body_that_is_not_json_with_400(project, configure_key):
    r = client(configure_key).generic("POST", "/api/v1/alert-rules", b"{not json", content_type="application/json")
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "$"


def test_it_documents_the_alert_rule_endpoints_in_the_openapi_document(db):
    spec = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert set(spec["paths"]["/api/v1/alert-rules"]) >= {"get", "post"}
    assert set(spec["paths"]["/api/v1/alert-rules/{rule_id}"]) >= {"get", "delete"}
    assert "AlertRuleRequest" in spec["components"]["schemas"]


def test_it_evaluates_and_delivers_from_the_management_command(project, receiver):
    from io import StringIO

    from django.core.management import call_command

    rule(project, kind="invariant_failures")
    store_and_analyse(project, [recent("compacted-1")])
    out = StringIO()
    call_command("evaluate_alerts", stdout=out)
    call_command("evaluate_alerts", stdout=out)
    assert out.getvalue().splitlines() == ["1 alert events (rules that started or stopped holding)",
                                           "0 alert events (rules that started or stopped holding)"]
    assert [a["state"] for a in alert_bodies(receiver)] == ["firing"]


def test_it_deletes_the_rules_and_their_events_with_the_project(project, other_project):
    from manifests.storage import retention

    r = rule(project, kind="invariant_failures")
    kept = rule(other_project, kind="invariant_failures")
    store_and_analyse(project, [recent("compacted-1")])
    assert alerts.evaluate_all() != [] and AlertEvent.objects.filter(rule=r).exists()
    retention.delete_project(project=project)
    assert list(AlertRule.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not AlertEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_it_writes_one_event_when_two_workers_evaluate_at_once(project):
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    r = rule(project, kind="invariant_failures")
    store_and_analyse(project, [recent("compacted-1")])
    barrier = threading.Barrier(2)

    def worker() -> list[int]:
        try:
            barrier.wait(timeout=10)
            return alerts.evaluate_all()
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        results = [f.result() for f in [pool.submit(worker), pool.submit(worker)]]
    assert sorted(len(x) for x in results) == [0, 1]
    assert events(r) == [(1, "firing")]


def test_it_keeps_a_firing_hit_rate_rule_firing_when_the_window_has_no_input(project, receiver):
    r = rule(project, kind="hit_rate_below", threshold=0.5)
    store_and_analyse(project, [quiet("low-0")])
    assert evaluate_and_deliver() != []
    assert evaluate_and_deliver(timezone.now() + timedelta(hours=3)) == []  # nothing to measure
    r.refresh_from_db()
    assert r.firing and r.last_value is None and events(r) == [(1, "firing")]
    assert len(receiver.requests) == 1
