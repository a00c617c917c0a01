"""The call selection shared by the operator commands (rebuild_rollups, reanalyse_calls):
``--project SLUG`` (repeatable; default every project), ``--since`` / ``--until`` (ISO 8601
date or time, UTC when no zone is given; ``--until`` is exclusive) and, where it makes sense,
``--call CALL_ID`` (repeatable). A bad value is a CommandError naming the option."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import QuerySet
from django.utils.dateparse import parse_date, parse_datetime

from manifests.models import Call, Project


def add_selection(parser: CommandParser, *, calls: bool) -> None:
    parser.add_argument("--project", action="append", default=[], metavar="SLUG",
                        help="a project's slug (repeatable); default: every project")
    parser.add_argument("--since", metavar="WHEN", help="calls started at or after this time (ISO 8601, UTC default)")
    parser.add_argument("--until", metavar="WHEN", help="calls started before this time (ISO 8601, UTC default)")
    if calls:
        parser.add_argument("--call", action="append", default=[], metavar="CALL_ID",
                            help="one call by its call_id (repeatable; needs exactly one --project)")


def parse_when(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        when = parse_datetime(value)
        if when is None and (day := parse_date(value)) is not None:
            when = datetime(day.year, day.month, day.day)
    except ValueError:
        when = None
    if when is None:
        raise CommandError(f"{option}: {value!r} is not an ISO 8601 date or time (e.g. 2026-11-29 or "
                           "2026-11-29T14:00:00Z)")
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def projects(slugs: list[str]) -> list[Project]:
    if not slugs:
        return list(Project.objects.order_by("slug"))
    found = {p.slug: p for p in Project.objects.filter(slug__in=slugs)}
    unknown = [s for s in slugs if s not in found]
    if unknown:
        raise CommandError(f"--project: no project with slug {', '.join(repr(s) for s in unknown)}")
    return [found[s] for s in dict.fromkeys(slugs)]


def time_range(options: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    since, until = parse_when(options.get("since"), "--since"), parse_when(options.get("until"), "--until")
    if since is not None and until is not None and until <= since:
        raise CommandError("--until must be after --since")
    return since, until


def selected_calls(options: dict[str, Any]) -> QuerySet[Call]:
    """The calls that ``--project``, ``--since``, ``--until`` and ``--call`` select."""
    chosen = projects(options["project"])
    since, until = time_range(options)
    query = Call.objects.filter(project__in=chosen)
    if since is not None:
        query = query.filter(started_at__gte=since)
    if until is not None:
        query = query.filter(started_at__lt=until)
    call_ids = options.get("call") or []
    if call_ids:
        if len(options["project"]) != 1:
            raise CommandError("--call needs exactly one --project (call ids are unique within a project)")
        query = query.filter(call_id__in=call_ids)
        missing = set(call_ids) - set(query.values_list("call_id", flat=True))
        if missing:
            raise CommandError(f"--call: no call {', '.join(repr(c) for c in sorted(missing))} in the selection")
    return query
