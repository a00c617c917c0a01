"""Task wiring: one JSON task per batch after commit, late acks, limits, retries, the sweep."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.utils import timezone

from ctxview.celery import (
    ALERT_INTERVAL_SECONDS,
    MAX_COUNTDOWN_SECONDS,
    ROLLUP_INTERVAL_SECONDS,
    VISIBILITY_TIMEOUT_SECONDS,
    app,
)
from manifests import analysis, tasks
from manifests.models import Call
from tests.pipeline.support import REDIS_URL, ROOT, broker, redis_prefix, require_redis  # noqa: F401 - fixture
from tests.support import manifest, store

TASKS = [tasks.analyze_calls, tasks.sweep_unanalysed, tasks.notify_regression, tasks.sweep_notifications]


@pytest.mark.django_db(transaction=True)
def test_it_enqueues_one_json_task_per_batch_after_commit(api, redis_prefix):  # noqa: F811
    client = require_redis()
    with broker(REDIS_URL, redis_prefix):
        response = api.post({"manifests": [manifest(f"c{n}", step=n) for n in range(5)]})
        assert response.status_code == 200
    messages = client.lrange(f"{redis_prefix}celery", 0, -1)
    assert len(messages) == 1
    message = json.loads(messages[0])
    assert message["content-type"] == "application/json"
    assert message["headers"]["task"] == "manifests.tasks.analyze_calls"
    assert message["headers"]["timelimit"] == [300, 240]
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert sorted(args[0]) == sorted(Call.objects.values_list("pk", flat=True)) and kwargs == {}


@pytest.mark.django_db(transaction=True)
def test_it_enqueues_nothing_for_a_batch_of_duplicates(api, redis_prefix):  # noqa: F811
    client = require_redis()
    body = {"manifests": [manifest("c1")]}
    with broker(REDIS_URL, redis_prefix):
        api.post(body)
        client.delete(f"{redis_prefix}celery")
        assert api.post(body).json()["duplicates"] == 1
    assert client.llen(f"{redis_prefix}celery") == 0


def test_it_speaks_json_only_and_acknowledges_late():
    assert app.conf.task_serializer == "json" and app.conf.accept_content == ["json"]
    assert app.conf.task_acks_late and app.conf.task_reject_on_worker_lost
    assert app.conf.worker_prefetch_multiplier == 1
    for task in TASKS:
        assert task.acks_late is not False, task.name
        assert task.time_limit and task.time_limit <= 300, task.name


def test_it_retries_transient_errors_with_capped_jittered_backoff():
    for task in (tasks.analyze_calls, tasks.sweep_unanalysed, tasks.notify_regression):
        assert task.retry_jitter and task.retry_backoff, task.name
        assert task.retry_backoff_max <= MAX_COUNTDOWN_SECONDS, task.name
        assert task.max_retries >= 3, task.name
    from django.db import OperationalError

    assert OperationalError in tasks.analyze_calls.autoretry_for


def test_it_keeps_the_visibility_timeout_above_every_countdown():
    assert VISIBILITY_TIMEOUT_SECONDS > MAX_COUNTDOWN_SECONDS
    assert app.conf.broker_transport_options["visibility_timeout"] == VISIBILITY_TIMEOUT_SECONDS


def test_it_schedules_the_sweeps_with_beat():
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    expected = {"manifests.tasks.sweep_unanalysed", "manifests.tasks.sweep_notifications",
                "manifests.tasks.enforce_retention", "manifests.tasks.ensure_partitions",
                "manifests.tasks.evaluate_alert_rules"}
    # The rollup refresh is scheduled where a beat runs, i.e. with Redis (CI's PostgreSQL run); without it
    # the interval is 0 and the analysis refreshes itself (both cases: tests/test_settings.py).
    if ROLLUP_INTERVAL_SECONDS > 0:
        expected.add("manifests.tasks.refresh_rollups")
        assert app.conf.beat_schedule["refresh-rollups"]["schedule"] == ROLLUP_INTERVAL_SECONDS
    assert scheduled == expected
    assert scheduled <= set(app.tasks)
    assert app.conf.beat_schedule["evaluate-alert-rules"]["schedule"] == ALERT_INTERVAL_SECONDS
    # A sweep run is bounded, and its bound comes from the environment (CTXVIEW_SWEEP_MAX_CALLS).
    sweep = app.conf.beat_schedule["sweep-unanalysed-calls"]["kwargs"]
    assert sweep["max_calls"] == 5000 and sweep["older_than_seconds"] == 60


@pytest.mark.parametrize(
    ("env", "message"),
    [({"CELERY_VISIBILITY_TIMEOUT": "soon"}, "CELERY_VISIBILITY_TIMEOUT='soon' is not a number"),
     ({"CTXVIEW_SWEEP_INTERVAL": "0"}, "CTXVIEW_SWEEP_INTERVAL=0 must be at least 0.5")],
)
def test_it_fails_loudly_on_a_bad_celery_setting(env, message):
    result = subprocess.run([sys.executable, "-c", "import ctxview.celery"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "SECRET_KEY": "x", **env})
    assert result.returncode != 0 and message in result.stderr


@pytest.mark.django_db
def test_it_sweeps_only_calls_left_unanalysed_long_enough(project):
    old, recent = store(project, [manifest("old"), manifest("recent", step=1)])
    Call.objects.filter(pk=old.pk).update(received_at=timezone.now() - timedelta(minutes=5))
    assert analysis.sweep_unanalysed(older_than_seconds=60).analysed == 1
    assert Call.objects.get(pk=old.pk).analyzed_at is not None
    assert Call.objects.get(pk=recent.pk).analyzed_at is None
    assert analysis.sweep_unanalysed(older_than_seconds=0).analysed == 1
    assert analysis.sweep_unanalysed(older_than_seconds=0).analysed == 0


@pytest.mark.django_db
def test_it_runs_the_task_function_as_a_plain_call(project):
    calls = store(project, [manifest("a"), manifest("b", step=1)])
    assert tasks.analyze_calls.run([c.pk for c in calls]) == 2
    assert tasks.analyze_calls.run([c.pk for c in calls]) == 0  # idempotent: a second run changes nothing


@pytest.mark.django_db(transaction=True)
def test_it_discards_a_connection_an_interrupted_task_left_in_a_transaction(project):
    from django.db import connection, transaction

    from ctxview.celery import release_stale_connections

    # What a task terminated half-way out of a transaction leaves behind: an atomic block
    # that never exited, on a connection that no longer works.
    block = transaction.atomic()
    block.__enter__()
    Call.objects.count()
    connection.connection.close()
    release_stale_connections(task=tasks.sweep_unanalysed)
    assert not connection.in_atomic_block
    assert Call.objects.count() == 0  # the next task's queries work on a fresh connection
    store(project, [manifest("after")])
    assert Call.objects.filter(call_id="after").exists()


@pytest.mark.django_db(transaction=True)
def test_it_holds_the_analysis_of_a_request_until_its_response_is_sent(project, redis_prefix):  # noqa: F811
    # The API view enqueues once the WSGI server closes its response: the client does not wait
    # for the broker. Until then the committed batch's task is held, not published.
    from manifests import ingest

    client = require_redis()
    body = json.dumps({"manifests": [manifest(f"c{n}", step=n) for n in range(3)]}).encode()
    with broker(REDIS_URL, redis_prefix):
        with ingest.analysis_after_response() as held:
            report = ingest.ingest_body(project=project, body=body)
        assert client.llen(f"{redis_prefix}celery") == 0
        assert [sorted(pks) for pks in held] == [sorted(report.stored_call_ids)]
        ingest.enqueue_analyses(held)
    messages = client.lrange(f"{redis_prefix}celery", 0, -1)
    assert len(messages) == 1 and held == []
    args, _, _ = json.loads(base64.b64decode(json.loads(messages[0])["body"]))
    assert sorted(args[0]) == sorted(report.stored_call_ids)
