"""Cache-hit regressions across runs, and their signed webhook."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from ctxkit.manifest import Usage
from manifests.analysis import notify
from manifests.models import Regression
from tests.analysis.support import STABLE, SYSTEM, TOOLS, free_port, item, prefix
from tests.support import Receiver, manifest, store_and_analyse

pytestmark = pytest.mark.django_db

HIT = Usage(input_tokens=3000, cache_read_tokens=1500, output_tokens=100)
MISS = Usage(input_tokens=3000, cache_write_tokens=1500, output_tokens=100)
STAMPED = prefix(system=(SYSTEM[0] + " Today is 2026-11-29 10:07.", 612), tools=TOOLS)


@pytest.fixture
def tuned(project):
    project.regression_window_calls = 5
    project.regression_threshold_points = 20
    project.save()
    return project


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def runs(project, plan, *, agent="analyst", start=0, gap_seconds=60, same_run=False):
    """One call per entry of ``plan`` ((usage, prefix)), each in its own run unless same_run."""
    manifests = [
        manifest(f"{agent}-{start + n}", bare=True, run_id="one-run" if same_run else f"run-{start + n}",
                 step=start + n if same_run else 0, seconds=(start + n) * gap_seconds, usage=usage, prefix=pfx,
                 agent=agent, items=[item("q", kind="user")])
        for n, (usage, pfx) in enumerate(plan)
    ]
    return store_and_analyse(project, manifests)


def test_it_records_a_regression_where_the_drop_crosses_the_threshold(tuned):
    calls = runs(tuned, [(HIT, STABLE)] * 10 + [(MISS, STAMPED)] * 5)
    regression = Regression.objects.get()
    # Windows of 5: at the 13th call the last five hit 2 x 0.5 / 5 = 0.2 against a baseline of 0.5.
    assert regression.call == calls[12]
    assert regression.first_call == calls[10]  # the new prefix arrived two calls earlier
    assert regression.detected_at == calls[12].started_at
    assert (regression.agent, regression.model) == ("analyst", calls[0].model)
    assert regression.baseline_rate == pytest.approx(0.5) and regression.current_rate == pytest.approx(0.2)
    assert regression.drop_points == pytest.approx(30)
    assert (regression.window_calls, regression.threshold_points) == (5, 20)
    assert (regression.prefix_before, regression.prefix_after) == (STABLE.hash, STAMPED.hash)
    assert [s["name"] for s in regression.segments_before] == ["system", "tools"]
    assert regression.segments_after[0]["hash"] == STAMPED.segments[0].hash
    assert (regression.cause, regression.changed_segment) == ("prefix_changed", "system")


def test_it_names_the_changed_segment_when_every_call_has_its_own_prefix(tuned):
    # A timestamp in the system prompt: each call's prefix is new, so no single
    # "after" prefix is common; the regression must still name the system segment.
    stamped = [
        prefix(system=(SYSTEM[0] + f" Current time: 2026-11-29 10:{n:02d}.", 612), tools=TOOLS) for n in range(5)
    ]
    calls = runs(tuned, [(HIT, STABLE)] * 10 + [(MISS, p) for p in stamped])
    regression = Regression.objects.get()
    assert regression.prefix_before == STABLE.hash
    assert regression.prefix_after == calls[12].prefix_hash != STABLE.hash
    assert (regression.cause, regression.changed_segment) == ("prefix_changed", "system")
    assert regression.first_call == calls[10]


def test_it_records_one_regression_per_drop_and_a_new_one_after_recovery(tuned):
    runs(tuned, [(HIT, STABLE)] * 10 + [(MISS, STAMPED)] * 8)
    assert Regression.objects.count() == 1  # the drop lasts: still the same regression
    runs(tuned, [(HIT, STABLE)] * 10 + [(MISS, STAMPED)] * 5, start=100)
    assert Regression.objects.count() == 2


def test_it_finds_the_same_regression_whatever_the_batch_size(tuned):
    plan = [(HIT, STABLE)] * 10 + [(MISS, STAMPED)] * 5
    for n, step in enumerate(plan):
        runs(tuned, [step], start=n)  # one call per batch, as a slow agent sends them
    regression = Regression.objects.get()
    assert regression.call.call_id == "analyst-12"


def test_it_ignores_a_drop_within_the_threshold(tuned):
    tuned.regression_threshold_points = 50
    tuned.save()
    runs(tuned, [(HIT, STABLE)] * 10 + [(MISS, STAMPED)] * 10)
    assert not Regression.objects.exists()


def test_it_keeps_agents_apart(tuned):
    runs(tuned, [(HIT, STABLE)] * 10, agent="analyst")
    runs(tuned, [(MISS, STAMPED)] * 10, agent="writer", start=10)
    assert not Regression.objects.exists()


def test_it_gives_the_ttl_as_the_cause_when_the_prefix_did_not_change(tuned):
    runs(tuned, [(HIT, STABLE)] * 10, same_run=True, gap_seconds=10)
    # Same prefix, but now an approval step makes every call wait 40 minutes.
    manifests = [manifest(f"late-{n}", bare=True, run_id="one-run", step=10 + n, seconds=100 + n * 2400, usage=MISS,
                          prefix=STABLE, agent="analyst", items=[item("q", kind="user")]) for n in range(5)]
    store_and_analyse(tuned, manifests)
    regression = Regression.objects.get()
    assert regression.prefix_before == regression.prefix_after == STABLE.hash
    assert regression.cause == "ttl_expired" and regression.changed_segment == ""


def test_it_never_lets_the_webhook_hold_up_the_analysis(tuned, django_capture_on_commit_callbacks):
    tuned.webhook_url = f"http://127.0.0.1:{free_port()}/nobody-listens"
    tuned.webhook_secret = "s3cret"
    tuned.save()
    with django_capture_on_commit_callbacks(execute=True):
        calls = runs(tuned, [(HIT, STABLE)] * 10 + [(MISS, STAMPED)] * 5)
    assert all(c.analyzed_at is not None for c in calls)
    assert Regression.objects.get().notified_at is None


def regression_for(project, url, secret="s3cret"):
    project.webhook_url, project.webhook_secret = url, secret
    project.save()
    runs(project, [(HIT, STABLE)] * 10 + [(MISS, STAMPED)] * 5)
    return Regression.objects.get()


def test_it_posts_a_signed_body_to_the_webhook(tuned, receiver):
    regression = regression_for(tuned, receiver.url)
    assert notify.send(regression.pk) == "sent"
    ((headers, body),) = receiver.requests
    assert headers["x-ctxview-signature"] == notify.sign("s3cret", body)
    assert notify.verify("s3cret", body, headers["x-ctxview-signature"])
    assert not notify.verify("other secret", body, headers["x-ctxview-signature"])
    assert headers["x-ctxview-event"] == "cache_regression" and headers["content-type"] == "application/json"
    sent = json.loads(body)["regression"]
    assert sent["id"] == regression.pk and sent["project"] == tuned.slug
    assert (sent["prefix_before"], sent["prefix_after"]) == (STABLE.hash, STAMPED.hash)
    assert sent["changed_segment"] == "system" and sent["drop_points"] == 30
    assert (sent["call_id"], sent["first_call_id"]) == ("analyst-12", "analyst-10")  # crossed; new prefix
    regression.refresh_from_db()
    assert regression.notified_at is not None and regression.notify_attempts == 1
    assert notify.send(regression.pk) == "already sent" and len(receiver.requests) == 1


def test_it_asks_for_a_retry_when_the_receiver_fails_and_counts_the_attempts(tuned, receiver):
    receiver.statuses = [503]
    regression = regression_for(tuned, receiver.url)
    with pytest.raises(notify.TransientNotifyError):
        notify.send(regression.pk)
    regression.refresh_from_db()
    assert (regression.notified_at, regression.notify_attempts, regression.notify_error) == (None, 1, "HTTP 503 from "
                                                                                            "the webhook")
    assert notify.send(regression.pk) == "sent"
    regression.refresh_from_db()
    assert regression.notify_attempts == 2 and regression.notified_at is not None
    # The same regression id both times: the receiver can drop the repeat.
    assert {json.loads(body)["regression"]["id"] for _, body in receiver.requests} == {regression.pk}


def test_it_retries_when_nobody_listens(tuned):
    regression = regression_for(tuned, f"http://127.0.0.1:{free_port()}/hook")
    with pytest.raises(notify.TransientNotifyError):
        notify.send(regression.pk)
    regression.refresh_from_db()
    assert regression.notify_error.startswith("network error")


@pytest.mark.parametrize("status", [400, 410, 302])
def test_it_gives_up_on_a_refusal_or_a_redirect(tuned, receiver, status):
    receiver.statuses = [status]
    regression = regression_for(tuned, receiver.url)
    assert notify.send(regression.pk) == f"refused ({status})"
    regression.refresh_from_db()
    assert regression.notified_at is None and f"HTTP {status}" in regression.notify_error


def test_it_lists_notifications_whose_retries_were_lost(tuned, receiver):
    regression = regression_for(tuned, receiver.url)
    now = timezone.now()
    assert notify.pending(now=now) == []  # just created: its task is on its way
    assert notify.pending(now=now + timedelta(minutes=2)) == [regression.pk]
    Regression.objects.filter(pk=regression.pk).update(notify_attempts=3, last_notify_attempt=now)
    assert notify.pending(now=now + timedelta(minutes=5)) == []  # a retry chain is alive
    assert notify.pending(now=now + timedelta(minutes=20)) == [regression.pk]
    Regression.objects.filter(pk=regression.pk).update(notify_attempts=notify.MAX_ATTEMPTS)
    assert notify.pending(now=now + timedelta(minutes=20)) == []  # given up
