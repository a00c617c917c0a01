"""Delivering an alert event to the project's webhook, through the one webhook sender
(manifests/analysis/notify.py: signature, timeout, no redirects, retryable statuses).

The body is ctxview's JSON, or a Slack or Discord incoming-webhook message: the rule's
``format`` says which, and ``auto`` picks by the URL (``https://hooks.slack.com/...``,
``https://discord.com/api/webhooks/...``), so a test can point a Slack-formatted rule at a
local receiver. Every body carries the event id, the idempotency key of a retried delivery.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.db.models import F, Q
from django.utils import timezone

from manifests.alerts.evaluate import describe
from manifests.analysis import notify
from manifests.models import AlertEvent, AlertRule

logger = logging.getLogger(__name__)

EVENT = "alert"
SLACK_TEXT_LIMIT = 3000  # a section block's text
DISCORD_CONTENT_LIMIT = 2000
DISCORD_DESCRIPTION_LIMIT = 4096
FIRING_COLOR, RESOLVED_COLOR = 0xD93025, 0x1E8E3E
SLACK_HOSTS = frozenset({"hooks.slack.com"})
DISCORD_HOSTS = frozenset({"discord.com", "discordapp.com", "ptb.discord.com", "canary.discord.com"})


def format_for(rule_format: str, url: str) -> str:
    """json, slack or discord: the rule's choice, or by the webhook URL when ``auto``."""
    if rule_format != AlertRule.AUTO:
        return rule_format
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host in SLACK_HOSTS:
        return AlertRule.SLACK
    if parts.scheme == "https" and host in DISCORD_HOSTS and parts.path.startswith("/api/webhooks/"):
        return AlertRule.DISCORD
    return AlertRule.JSON


def payload(event: AlertEvent) -> dict[str, Any]:
    rule = event.rule
    return {
        "event": EVENT,
        "alert": {
            "id": event.pk,
            "project": rule.project.slug,
            "rule_id": rule.pk,
            "kind": rule.kind,
            "state": event.transition,
            "episode": event.episode,
            "at": event.at.isoformat(),
            "value": event.value,
            "threshold": rule.threshold,
            "window_hours": rule.window_hours,
            "agent": rule.agent,
            "model": rule.model,
            "evidence_key": rule.evidence_key,
            "rule": describe(rule),
            "summary": event.summary,
        },
    }


def _mrkdwn(text: str) -> str:
    """Slack's three control characters, escaped as its message formatting asks."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_message(event: AlertEvent) -> dict[str, Any]:
    """An incoming-webhook message: ``text`` (the notification's fallback) and blocks."""
    rule = event.rule
    firing = event.transition == AlertEvent.FIRING
    head = ":rotating_light: *Firing*" if firing else ":white_check_mark: *Resolved*"
    body = _cut(f"{head} · *{_mrkdwn(rule.project.name)}*\n{_mrkdwn(event.summary)}", SLACK_TEXT_LIMIT)
    context = _cut(_mrkdwn(f"ctxview · rule {rule.pk} ({rule.kind}) · episode {event.episode} · "
                           f"{event.at:%Y-%m-%d %H:%M} UTC · event {event.pk}"), SLACK_TEXT_LIMIT)
    return {
        "text": _cut(f"[{rule.project.name}] {event.summary}", SLACK_TEXT_LIMIT),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": body}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
        ],
    }


def discord_message(event: AlertEvent) -> dict[str, Any]:
    """An incoming-webhook message: ``content`` and one embed."""
    rule = event.rule
    firing = event.transition == AlertEvent.FIRING
    value = "—" if event.value is None else f"{event.value:g}"
    return {
        "content": _cut(f"[{rule.project.name}] {event.summary}", DISCORD_CONTENT_LIMIT),
        "embeds": [{
            "title": _cut(f"{'Firing' if firing else 'Resolved'}: {rule.get_kind_display()}", 256),
            "description": _cut(event.summary, DISCORD_DESCRIPTION_LIMIT),
            "color": FIRING_COLOR if firing else RESOLVED_COLOR,
            "timestamp": event.at.isoformat(),
            "fields": [
                {"name": "Project", "value": _cut(rule.project.slug, 1024), "inline": True},
                {"name": "Value", "value": value, "inline": True},
                {"name": "Threshold", "value": f"{rule.threshold:g}", "inline": True},
            ],
            "footer": {"text": f"ctxview · rule {rule.pk} · episode {event.episode} · event {event.pk}"},
        }],
    }


def body_for(event: AlertEvent, url: str) -> bytes:
    kind = format_for(event.rule.format, url)
    message = (slack_message(event) if kind == AlertRule.SLACK
               else discord_message(event) if kind == AlertRule.DISCORD else payload(event))
    return json.dumps(message, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _record(event_id: int, **fields: Any) -> None:
    AlertEvent.objects.filter(pk=event_id).update(**fields)


def send(event_id: int) -> str:
    """One delivery attempt. Returns what happened; raises notify.TransientNotifyError when
    a later attempt may succeed (the task retries with backoff and jitter)."""
    event = AlertEvent.objects.select_related("rule", "rule__project").filter(pk=event_id).first()
    if event is None:
        return "gone"
    if event.notified_at is not None:
        return "already sent"
    if event.notify_attempts >= notify.MAX_ATTEMPTS:
        return "gave up"
    project = event.rule.project
    if not project.webhook_url:
        # Nobody to tell now; sending it once a URL is set would report an old change.
        _record(event_id, notify_attempts=notify.MAX_ATTEMPTS, notify_error="no webhook URL was set")
        return "no webhook"
    _record(event_id, notify_attempts=F("notify_attempts") + 1, last_notify_attempt=timezone.now())
    result = notify.attempt(project.webhook_url, project.webhook_secret, EVENT, body_for(event, project.webhook_url))
    if result.delivered:
        _record(event_id, notified_at=timezone.now(), notify_error="")
        return "sent"
    _record(event_id, notify_error=result.error)
    if result.retry:
        raise notify.TransientNotifyError(result.error)
    logger.warning("webhook of project %s refused alert event %s: %s", project.slug, event_id, result.error)
    _record(event_id, notify_attempts=notify.MAX_ATTEMPTS)
    return f"refused ({result.status})"


def pending(*, now: Any = None, stale_after: timedelta = timedelta(minutes=15)) -> list[int]:
    """Events never delivered whose retry chain is gone (never tried: the broker was down;
    last tried long ago), for the beat to enqueue again."""
    now = now or timezone.now()
    return list(
        AlertEvent.objects.filter(notified_at__isnull=True, notify_attempts__lt=notify.MAX_ATTEMPTS)
        .filter(Q(last_notify_attempt__isnull=True, at__lt=now - timedelta(minutes=1))
                | Q(last_notify_attempt__lt=now - stale_after))
        .order_by("pk")
        .values_list("pk", flat=True)[:500]
    )


def to_deliver(new: list[int]) -> list[int]:
    """The events to deliver after an evaluation: its new ones, then those :func:`pending` finds."""
    return [*new, *(pk for pk in pending() if pk not in new)]
