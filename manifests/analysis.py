"""Analysis of stored calls. Idempotent: analysing a call twice changes nothing."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from manifests.models import Call


def analyze_calls(call_ids: list[int]) -> int:
    """Mark the given calls analysed. Returns how many were newly analysed."""
    with transaction.atomic():
        pending = list(
            Call.objects.select_for_update(skip_locked=True)
            .filter(pk__in=call_ids, analyzed_at__isnull=True)
            .values_list("pk", flat=True)
        )
        if not pending:
            return 0
        Call.objects.filter(pk__in=pending).update(analyzed_at=timezone.now())
    return len(pending)


def sweep_unanalysed(*, older_than_seconds: int = 30, limit: int = 500) -> int:
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    ids = list(
        Call.objects.filter(analyzed_at__isnull=True, received_at__lt=cutoff)
        .order_by("received_at")
        .values_list("pk", flat=True)[:limit]
    )
    return analyze_calls(ids) if ids else 0
