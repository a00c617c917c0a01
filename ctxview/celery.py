"""The Celery app. All Celery settings live here, in one place.

Without REDIS_URL the app runs every task eagerly in the calling process (the
embedded default); with it, tasks go to Redis and a worker consumes them
(``celery -A ctxview worker --beat``). See docs/analysis.md, "Reliability".
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from celery import Celery, Task
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")

logger = logging.getLogger(__name__)


def _env_number(name: str, default: float, *, minimum: float) -> float:
    """Celery is configured before Django's settings, so it reads its few numbers itself,
    and like settings.py it refuses a bad value instead of running with a silent default."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{name}={raw!r} is not a finite number")
    if value < minimum:
        raise ValueError(f"{name}={value:g} must be at least {minimum:g}")
    return value


# The longest delay any task is ever scheduled with (retry backoff caps use it).
MAX_COUNTDOWN_SECONDS = 600

# Redis hands an unacknowledged task to another worker after the visibility timeout.
# It must exceed every countdown: a task waiting for its retry ETA is held unacknowledged
# by a worker, and a shorter timeout would deliver it a second time meanwhile. The fault
# tests lower it (to see a killed worker's task redelivered within seconds).
VISIBILITY_TIMEOUT_SECONDS = _env_number("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=1)
if VISIBILITY_TIMEOUT_SECONDS <= MAX_COUNTDOWN_SECONDS:
    logger.warning(
        "CELERY_VISIBILITY_TIMEOUT=%g is not above the longest countdown (%ds): a task waiting to be "
        "retried may be delivered twice (harmless, tasks are idempotent, but wasteful)",
        VISIBILITY_TIMEOUT_SECONDS,
        MAX_COUNTDOWN_SECONDS,
    )

# The sweep analyses calls stored but never analysed (Redis down at ingest, a lost task)
# once they are older than SWEEP_MIN_AGE, so it never races a task still in the queue.
SWEEP_INTERVAL_SECONDS = _env_number("CTXVIEW_SWEEP_INTERVAL", 60, minimum=0.5)
SWEEP_MIN_AGE_SECONDS = _env_number("CTXVIEW_SWEEP_MIN_AGE", 60, minimum=0)
# One sweep run claims chunks until nothing is waiting or it reaches these bounds; a run
# cut short enqueues the next one at once (manifests/tasks.py). The time bound stays
# below the task's soft time limit.
SWEEP_MAX_CALLS = int(_env_number("CTXVIEW_SWEEP_MAX_CALLS", 5000, minimum=1))
SWEEP_MAX_SECONDS = 120.0

_redis_url = os.environ.get("REDIS_URL", "")

# Alert rules are evaluated over the rollups this often (manifests/alerts/).
ALERT_INTERVAL_SECONDS = _env_number("CTXVIEW_ALERT_INTERVAL_SECONDS", 60, minimum=5)

# Rollups: the analysis marks the buckets it touches dirty, and the beat task refreshes each
# dirty bucket once per interval (manifests/analysis/rollups.py). 0 refreshes right after
# every analysis task instead, the only mode without Redis (no beat runs there), which
# settings.py enforces.
ROLLUP_INTERVAL_SECONDS = _env_number("CTXVIEW_ROLLUP_INTERVAL_SECONDS", 5 if _redis_url else 0, minimum=0)
_transport_options: dict[str, object] = {
    "visibility_timeout": VISIBILITY_TIMEOUT_SECONDS,
    "socket_connect_timeout": 2,
    "socket_timeout": 5,
}
# Several deployments (or test runs) can share one Redis: every key gets this prefix.
if os.environ.get("CTXVIEW_CELERY_KEY_PREFIX"):
    _transport_options["global_keyprefix"] = os.environ["CTXVIEW_CELERY_KEY_PREFIX"]

app = Celery("ctxview")

app.conf.update(
    broker_url=_redis_url or "memory://",
    task_always_eager=not _redis_url,
    task_eager_propagates=False,
    task_ignore_result=True,
    result_backend=None,
    # JSON only: a task message can never carry a pickled object.
    task_serializer="json",
    accept_content=["json"],
    # A task is acknowledged after it ran, and given back to the queue if the worker
    # dies under it; tasks are idempotent, so a redelivery is harmless.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_cancel_long_running_tasks_on_connection_loss=True,
    worker_prefetch_multiplier=1,
    # Defaults; each task sets its own limits (manifests/tasks.py).
    task_time_limit=300,
    task_soft_time_limit=240,
    broker_transport_options=_transport_options,
    # Publishing must not hang an ingest request when Redis is down: try briefly,
    # then give up; the sweep analyses the stored calls later.
    task_publish_retry=True,
    task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5},
    broker_connection_retry_on_startup=True,
    broker_connection_timeout=2,
    beat_schedule={
        "sweep-unanalysed-calls": {
            "task": "manifests.tasks.sweep_unanalysed",
            "schedule": SWEEP_INTERVAL_SECONDS,
            "kwargs": {"older_than_seconds": SWEEP_MIN_AGE_SECONDS, "max_calls": SWEEP_MAX_CALLS},
        },
        "sweep-webhook-notifications": {
            "task": "manifests.tasks.sweep_notifications",
            "schedule": max(SWEEP_INTERVAL_SECONDS, 60.0),
        },
        "evaluate-alert-rules": {
            "task": "manifests.tasks.evaluate_alert_rules",
            "schedule": ALERT_INTERVAL_SECONDS,
            # A run still queued when the next one is due is dropped: the next one does its work.
            "options": {"expires": ALERT_INTERVAL_SECONDS * 2},
        },
        "ensure-partitions": {
            "task": "manifests.tasks.ensure_partitions",
            "schedule": 3600.0,
        },
        **(
            {
                "refresh-rollups": {
                    "task": "manifests.tasks.refresh_rollups",
                    "schedule": ROLLUP_INTERVAL_SECONDS,
                    # A run still queued when the next one is due is dropped: the next one does its work.
                    "options": {"expires": max(ROLLUP_INTERVAL_SECONDS * 2, 10.0)},
                }
            }
            if ROLLUP_INTERVAL_SECONDS > 0
            else {}
        ),
        "enforce-retention": {
            "task": "manifests.tasks.enforce_retention",
            "schedule": 24 * 3600.0,
        },
    },
    timezone="UTC",
    # Celery's Django fix-up closes the database connection before and after every task
    # unless told to reuse it, so each task would connect anew, a large share of a batch's
    # analysis on PostgreSQL. Reuse it; the handler below closes it the way Django
    # does after a request, when it broke or is older than CONN_MAX_AGE.
    CELERY_DB_REUSE_MAX=1000,
)


@task_prerun.connect
@task_postrun.connect
def release_stale_connections(task: Task[Any, Any] | None = None, **kwargs: object) -> None:  # any task
    if task is not None and task.request.is_eager:
        return  # inside the caller's request and transaction: never close its connection
    from django.db import close_old_connections

    discard_interrupted_transactions()
    close_old_connections()


def discard_interrupted_transactions() -> None:
    """Drop a connection an interrupted task left inside a transaction.

    Between two tasks no transaction is open. One still is when a task was stopped in the
    middle of one: Celery terminates a task it can no longer acknowledge (late ack, broker
    connection lost), and psycopg can turn that SystemExit into an error half-way out of
    the transaction, so Django's atomic block never exits and every later task of this
    process would fail ("Cannot open a new connection in an atomic block"). The server
    rolled the transaction back when the socket closed; here the connection is closed
    and forgotten, and the next query opens a fresh one."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if not (conn.in_atomic_block or conn.closed_in_transaction):
            continue
        logger.error("a task left database connection %r inside a transaction; discarding it", conn.alias)
        try:
            if conn.connection is not None:
                conn.connection.close()
        except Exception:  # it is broken already; we only let go of it
            pass
        conn.connection = None
        # connect() resets the rest of the transaction state; these two keep it from refusing.
        conn.in_atomic_block = False
        conn.closed_in_transaction = False


app.autodiscover_tasks()
