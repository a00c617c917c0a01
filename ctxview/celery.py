"""The Celery app. All Celery settings live here, in one place.

Without REDIS_URL the app runs every task eagerly in the calling process (the
embedded default); with it, tasks go to Redis and a worker consumes them.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")

app = Celery("ctxview")

_redis_url = os.environ.get("REDIS_URL", "")

app.conf.update(
    broker_url=_redis_url or "memory://",
    task_always_eager=not _redis_url,
    task_eager_propagates=False,
    task_ignore_result=True,
    result_backend=None,
    # JSON only: a task message can never carry a pickled object.
    task_serializer="json",
    accept_content=["json"],
    # A task is acknowledged after it ran, and given back to the queue if the
    # worker dies under it; tasks are idempotent, so a redelivery is harmless.
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_time_limit=300,
    task_soft_time_limit=240,
    # Redis redelivers an unacknowledged task after the visibility timeout; it must
    # be longer than any countdown or retry delay we use (at most 10 minutes).
    broker_transport_options={"visibility_timeout": 3600, "socket_connect_timeout": 2, "socket_timeout": 5},
    # Publishing must not hang an ingest request when Redis is down: try briefly,
    # then give up; the sweep analyses the stored calls later.
    task_publish_retry=True,
    task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5},
    broker_connection_retry_on_startup=True,
    broker_connection_timeout=2,
    beat_schedule={
        "sweep-unanalysed-calls": {"task": "manifests.tasks.sweep_unanalysed", "schedule": 60.0},
    },
    timezone="UTC",
)
app.autodiscover_tasks()
