"""Webhook notification of a cache-hit regression: a signed JSON POST.

The one webhook sender: alert rules (manifests/alerts/) deliver through :func:`attempt` too,
with the same signature, timeout, refusal of redirects and retryable statuses.

The body is JSON; the header ``X-Ctxview-Signature: sha256=<hex>`` is the
HMAC-SHA256 of the exact body bytes with the project's ``webhook_secret``, so the
receiver can check it came from ctxview and was not altered. ``regression.id`` in
the body is the idempotency key: a retried delivery carries the same id.

Sending runs as its own Celery task, never inside the analysis: a slow or broken
receiver can delay a notification, never an analysis.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from email.message import Message
from typing import IO, Any

from django.db.models import F, Q
from django.utils import timezone

from manifests.models import Project, Regression

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Ctxview-Signature"
EVENT_HEADER = "X-Ctxview-Event"
TIMEOUT_SECONDS = 5
MAX_ATTEMPTS = 9  # the first try and 8 retries
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class TransientNotifyError(Exception):
    """The receiver may accept a later attempt (network error, timeout, 429, 5xx)."""


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, signature: str) -> bool:
    """What a receiver does (shown in docs/analysis.md); constant-time comparison."""
    return hmac.compare_digest(sign(secret, body), signature)


def payload(regression: Regression) -> dict[str, Any]:
    project = regression.project
    return {
        "event": "cache_regression",
        "regression": {
            "id": regression.pk,
            "project": project.slug,
            "agent": regression.agent,
            "model": regression.model,
            "detected_at": regression.detected_at.isoformat(),
            "call_id": regression.call.call_id,
            "first_call_id": regression.first_call.call_id if regression.first_call else None,
            "window_calls": regression.window_calls,
            "threshold_points": regression.threshold_points,
            "baseline_rate": round(regression.baseline_rate, 4),
            "current_rate": round(regression.current_rate, 4),
            "drop_points": round(regression.drop_points, 2),
            "cause": regression.cause,
            "changed_segment": regression.changed_segment,
            "prefix_before": regression.prefix_before,
            "prefix_after": regression.prefix_after,
            "segments_before": regression.segments_before,
            "segments_after": regression.segments_after,
        },
    }


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect would re-send (or drop) the signed body somewhere else: refuse it.
    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: Message, newurl: str) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def post_signed(url: str, secret: str, event: str, body: bytes) -> int:
    """POST a signed body; the receiver's HTTP status (network errors raise)."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "ctxview-webhook/1",
            EVENT_HEADER: event,
            SIGNATURE_HEADER: sign(secret, body),
        },
    )
    try:
        with _opener.open(request, timeout=TIMEOUT_SECONDS) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


def send_test(project: Project) -> tuple[bool, str]:
    """The settings page's "send a test": one signed ``test`` event, now, no retry.
    Returns whether the receiver accepted it (2xx) and what happened, for the owner to read."""
    if not project.webhook_url:
        return False, "no webhook URL is set"
    body = json.dumps(
        {"event": "test", "project": project.slug, "sent_at": timezone.now().isoformat(),
         "threshold_points": project.regression_threshold_points, "window_calls": project.regression_window_calls},
        sort_keys=True, separators=(",", ":"),
    ).encode()
    try:
        status = post_signed(project.webhook_url, project.webhook_secret, "test", body)
    except (urllib.error.URLError, OSError) as exc:
        return False, f"network error: {exc}"
    if 200 <= status < 300:
        return True, f"the receiver answered HTTP {status}"
    return False, f"the receiver answered HTTP {status}"


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt: ``delivered`` on a 2xx; otherwise ``error`` says why and
    ``retry`` whether a later attempt may succeed (network error, timeout, 429, 5xx)."""

    delivered: bool
    error: str = ""
    retry: bool = False
    status: int | None = None  # the receiver's HTTP status; None on a network error


def attempt(url: str, secret: str, event: str, body: bytes) -> Attempt:
    """POST a signed body once and classify the answer."""
    try:
        status = post_signed(url, secret, event, body)
    except (urllib.error.URLError, OSError) as exc:  # refused, DNS, timeout
        return Attempt(False, f"network error: {exc}"[:2000], True)
    if 200 <= status < 300:
        return Attempt(True, status=status)
    return Attempt(False, f"HTTP {status} from the webhook", status in RETRYABLE_STATUS, status)


def _record(regression_id: int, **fields: Any) -> None:
    Regression.objects.filter(pk=regression_id).update(**fields)


def send(regression_id: int) -> str:
    """One delivery attempt. Returns what happened; raises TransientNotifyError when a
    later attempt may succeed (the task retries with backoff and jitter)."""
    regression = Regression.objects.select_related("project", "call", "first_call").filter(pk=regression_id).first()
    if regression is None:
        return "gone"
    if regression.notified_at is not None:
        return "already sent"
    project = regression.project
    if not project.webhook_url:
        return "no webhook"
    if regression.notify_attempts >= MAX_ATTEMPTS:
        return "gave up"
    Regression.objects.filter(pk=regression_id).update(
        notify_attempts=F("notify_attempts") + 1, last_notify_attempt=timezone.now()
    )
    body = json.dumps(payload(regression), sort_keys=True, separators=(",", ":")).encode()
    result = attempt(project.webhook_url, project.webhook_secret, "cache_regression", body)
    if result.delivered:
        _record(regression_id, notified_at=timezone.now(), notify_error="")
        return "sent"
    _record(regression_id, notify_error=result.error)
    if result.retry:
        raise TransientNotifyError(result.error)
    logger.warning("webhook of project %s refused regression %s: %s", project.slug, regression_id, result.error)
    return f"refused ({result.status})"


def pending(*, now: Any = None, stale_after: timedelta = timedelta(minutes=15)) -> list[int]:
    """Regressions whose notification was never sent and whose retry chain is gone: never
    tried (the broker was down when it was detected) or last tried long ago (longer than
    any retry countdown). The beat sweep re-enqueues them."""
    now = now or timezone.now()
    return list(
        Regression.objects.filter(notified_at__isnull=True, notify_attempts__lt=MAX_ATTEMPTS)
        .exclude(project__webhook_url="")
        .filter(
            Q(last_notify_attempt__isnull=True, created__lt=now - timedelta(minutes=1))
            | Q(last_notify_attempt__lt=now - stale_after)
        )
        .order_by("pk")
        .values_list("pk", flat=True)[:500]
    )

