"""Operational figures: shared counters, the client-disconnect handler and /healthz.

Kept apart from ingest and the API so that what an operator watches (a backlog of
unanalysed calls, quarantined calls, clients that hang up mid-body) is read in one place.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from manifests.models import Call, OpsCounter, RollupMark

logger = logging.getLogger(__name__)

CLIENT_DISCONNECTS = "client_disconnects"


def increment(name: str, by: int = 1) -> None:
    """Add to a counter with one upsert: concurrent processes never lose an increment."""
    table = OpsCounter._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (name, value, updated) VALUES (%s, %s, %s) "
            f"ON CONFLICT (name) DO UPDATE SET value = {table}.value + excluded.value, updated = excluded.updated",
            [name, by, connection.ops.adapt_datetimefield_value(timezone.now())],
        )


def counter(name: str) -> int:
    return OpsCounter.objects.filter(name=name).values_list("value", flat=True).first() or 0


def client_disconnected(request: Any, exc: Exception) -> None:
    """The client closed the connection while we read its body (Django's UnreadablePostError).

    A client problem, not ours: one info line without a traceback, and a counter on
    /healthz, instead of a 500 with a traceback in error monitoring. Nothing was stored
    (the body was never complete), and the client, if still there, retries."""
    logger.info(
        "client disconnected while sending the body of %s %s (%s); nothing stored",
        getattr(request, "method", "?"),
        getattr(request, "path", "?"),
        exc,
    )
    try:
        with transaction.atomic():
            increment(CLIENT_DISCONNECTS)
    except DatabaseError:  # the counter is a figure: never turn a client error into ours
        logger.warning("could not count a client disconnect", exc_info=True)


def backlog() -> dict[str, Any]:
    """Unanalysed and quarantined calls, and the age of the oldest unanalysed one; the oldest
    rollup mark not refreshed yet (growing past the interval: no beat is refreshing)."""
    waiting = Call.objects.filter(analyzed_at__isnull=True, quarantined_at__isnull=True)
    oldest = waiting.order_by("received_at").values_list("received_at", flat=True).first()
    stale = RollupMark.objects.order_by("pk").values_list("marked_at", flat=True).first()
    return {
        "unanalysed_calls": waiting.count(),
        "oldest_unanalysed_seconds": round((timezone.now() - oldest).total_seconds(), 1) if oldest else None,
        "quarantined_calls": Call.objects.filter(quarantined_at__isnull=False).count(),
        "oldest_rollup_mark_seconds": round((timezone.now() - stale).total_seconds(), 1) if stale else None,
    }


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and the pipeline's figures, for a load balancer and an operator. Totals only,
    no project data: open like any health endpoint. 503 when the database is unreachable."""
    try:
        body: dict[str, Any] = {"status": "ok", **backlog(), CLIENT_DISCONNECTS: counter(CLIENT_DISCONNECTS)}
    except DatabaseError as exc:
        return JsonResponse({"status": "error", "error": f"database unreachable: {exc.__class__.__name__}"}, status=503)
    return JsonResponse(body)
