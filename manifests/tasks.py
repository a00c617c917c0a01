"""Celery tasks: thin wrappers that take ids and call analysis functions.

Every task is idempotent (running it twice changes nothing), acknowledged late
(see ctxview/celery.py) and retried with backoff and jitter on transient errors.
"""

from __future__ import annotations

from celery import shared_task
from django.db import DatabaseError, InterfaceError, OperationalError

from manifests import analysis

TRANSIENT = (OperationalError, InterfaceError, DatabaseError, ConnectionError)


@shared_task(
    bind=True,
    autoretry_for=TRANSIENT,
    retry_backoff=2,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=8,
    acks_late=True,
)
def analyze_calls(self, call_ids: list[int]) -> int:
    """Analyse one ingested batch (one task per batch, never per manifest)."""
    return analysis.analyze_calls(call_ids)


@shared_task(bind=True, autoretry_for=TRANSIENT, retry_backoff=2, retry_jitter=True, max_retries=3)
def sweep_unanalysed(self, older_than_seconds: int = 30, limit: int = 500) -> int:
    """Find calls stored but never analysed (broker down at ingest, worker died) and analyse them."""
    return analysis.sweep_unanalysed(older_than_seconds=older_than_seconds, limit=limit)
