"""Celery tasks: thin wrappers that take ids and call the analysis.

Every task is idempotent (running it twice changes nothing), acknowledged late and
given back to the queue when its worker dies (ctxview/celery.py), time-limited,
and retried with exponential backoff and full jitter on transient errors. Delays
never exceed MAX_COUNTDOWN_SECONDS, which the broker's visibility timeout exceeds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.db import IntegrityError, InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerError

from ctxview.celery import MAX_COUNTDOWN_SECONDS, SWEEP_MAX_CALLS, SWEEP_MAX_SECONDS
from manifests import alerts, analysis
from manifests.analysis import notify, rollups
from manifests.storage import partitions, retention

logger = logging.getLogger(__name__)

# Worth another try: the database restarting or failing over, a lost connection, a
# deadlock or serialization failure (OperationalError), a unique-key race between two
# workers (IntegrityError), the broker away while enqueueing a follow-up.
TRANSIENT = (OperationalError, InterfaceError, IntegrityError, BrokerError, ConnectionError, TimeoutError)

# What the analysis tasks share: retry transient errors with capped, jittered backoff
# (below the visibility timeout), acknowledge late, and stop a stuck task.
ANALYSIS_TASK: dict[str, Any] = {
    "bind": True,
    "autoretry_for": TRANSIENT,
    "retry_backoff": 2,
    "retry_backoff_max": MAX_COUNTDOWN_SECONDS // 2,
    "retry_jitter": True,
    "acks_late": True,
    "time_limit": 300,
    "soft_time_limit": 240,
}


def enqueue_notifications(regression_ids: list[int]) -> None:
    """After an analysis commit, one notify task per new regression. A broker failure here
    must not fail the analysis: the notification sweep sends them later."""
    for pk in regression_ids:
        try:
            notify_regression.delay(pk)
        except Exception:  # broker down: the sweep retries
            logger.warning("could not enqueue the webhook of regression %s; the sweep will", pk)


@shared_task(**ANALYSIS_TASK, max_retries=8)
def analyze_calls(self: Task[[list[int]], int], call_ids: list[int]) -> int:
    """Analyse one ingested batch (one task per batch, never per manifest)."""
    try:
        return analysis.analyze_calls(call_ids, notify=enqueue_notifications)
    except SoftTimeLimitExceeded:
        # Finished chunks are committed; the rest stays unanalysed for the sweep.
        logger.warning("analysis of %d calls hit its time limit; the sweep finishes it", len(call_ids))
        return 0


@shared_task(**ANALYSIS_TASK, max_retries=3)
def sweep_unanalysed(
    self: Task[[float, int, float], int],
    older_than_seconds: float = 60,
    max_calls: int = SWEEP_MAX_CALLS,
    max_seconds: float = SWEEP_MAX_SECONDS,
) -> int:
    """Find calls stored but never analysed (broker down at ingest, a lost task) and analyse
    them. A run cut short by its bound enqueues the next one at once, so a backlog drains
    without waiting for the beat, on whichever workers are free."""
    options = {"older_than_seconds": older_than_seconds, "max_calls": max_calls, "max_seconds": max_seconds}
    try:
        result = analysis.sweep_unanalysed(older_than_seconds=older_than_seconds, max_calls=max_calls,
                                           max_seconds=max_seconds, notify=enqueue_notifications)
    except SoftTimeLimitExceeded:
        return 0
    if result.cut_short and not self.request.is_eager:
        logger.info("sweep run reached its bound with %d calls waiting; continuing at once", result.remaining)
        sweep_unanalysed.apply_async(kwargs=options)
    return result.analysed


@shared_task(**ANALYSIS_TASK, max_retries=3)
def refresh_rollups(self: Task[[], int]) -> int:
    """Beat, every CTXVIEW_ROLLUP_INTERVAL_SECONDS: recompute each dirty rollup bucket once.
    Safe on several workers at once (they claim different marks); returns buckets refreshed."""
    try:
        return rollups.refresh()
    except SoftTimeLimitExceeded:
        return 0  # finished groups are committed; the rest stay marked for the next run


# A webhook delivery: signed, retried with backoff up to notify.MAX_ATTEMPTS attempts.
WEBHOOK_DELIVERY: dict[str, Any] = {  # with bind=True
    "autoretry_for": (notify.TransientNotifyError, *TRANSIENT),
    "retry_backoff": 5,
    "retry_backoff_max": MAX_COUNTDOWN_SECONDS,
    "retry_jitter": True,
    "max_retries": notify.MAX_ATTEMPTS - 1,
    "acks_late": True,
    "time_limit": 60,
    "soft_time_limit": 45,
}


def _deliver(task: Task[[int], str], send: Callable[[int], str], pk: int) -> str:
    if task.request.is_eager:
        # Without a broker (the embedded default) this runs inside the caller's request: one
        # attempt only, never a blocking retry loop; the sweep or the next beat run tries again.
        try:
            return send(pk)
        except notify.TransientNotifyError as exc:
            return f"failed: {exc}"
    return send(pk)


@shared_task(bind=True, **WEBHOOK_DELIVERY)
def notify_regression(self: Task[[int], str], regression_id: int) -> str:
    """POST one regression to its project's webhook."""
    return _deliver(self, notify.send, regression_id)


@shared_task(bind=True, autoretry_for=TRANSIENT, retry_backoff=2, retry_jitter=True, max_retries=3, time_limit=60)
def sweep_notifications(self: Task[[], int]) -> int:
    """Re-enqueue webhook notifications that were never sent and whose retries are gone."""
    pending = notify.pending()
    for pk in pending:
        notify_regression.delay(pk)
    return len(pending)


@shared_task(bind=True, autoretry_for=TRANSIENT, retry_backoff=2, retry_jitter=True, max_retries=3, time_limit=240,
             soft_time_limit=200, acks_late=True)
def evaluate_alert_rules(self: Task[[], int]) -> int:
    """Beat, every CTXVIEW_ALERT_INTERVAL_SECONDS: evaluate every alert rule and enqueue the
    delivery of each new event, and of events whose retries were lost. Rerunning it sends
    nothing twice: an event is written once per episode start or end. Returns new events."""
    new = alerts.evaluate_all()
    for pk in alerts.to_deliver(new):
        try:
            notify_alert.delay(pk)
        except Exception:  # broker down: the next run enqueues it again
            logger.warning("could not enqueue the delivery of alert event %s; the next run will", pk)
    return len(new)


@shared_task(bind=True, **WEBHOOK_DELIVERY)
def notify_alert(self: Task[[int], str], event_id: int) -> str:
    """POST one alert event (firing or resolved) to its project's webhook."""
    return _deliver(self, alerts.send, event_id)


@shared_task(bind=True, autoretry_for=TRANSIENT, retry_backoff=10, retry_jitter=True, max_retries=5, time_limit=600)
def ensure_partitions(self: Task[[], int]) -> int:
    """Hourly: create today's partitions and those of the days ahead (PostgreSQL; a no-op
    on SQLite). Ingest creates a missing day itself, so a late run never fails an ingest."""
    return partitions.ensure_ahead()


@shared_task(bind=True, autoretry_for=TRANSIENT, retry_backoff=60, retry_jitter=True, max_retries=3, time_limit=3600)
def enforce_retention(self: Task[[], dict[str, int]]) -> dict[str, int]:
    """Daily: expire raw calls past each project's retention, rollups past theirs."""
    return retention.enforce_retention()
