"""Dashboard filters: project (in the path), agent, model and a time range, all in the URL.

Every page reads the same :class:`Filters` from the query string so a view can be
shared as a link. A bad value is a :class:`FilterError` naming the parameter; views
answer it with a 400, never a 500.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar
from urllib.parse import urlencode

from django.db.models import F, Model, QuerySet
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from ctxkit.manifest import EARLIEST, LATEST

M = TypeVar("M", bound=Model)

# Named ranges offered in the filter bar; "all" means no time bound.
RANGES: dict[str, timedelta | None] = {
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
    "90d": timedelta(days=90),
    "all": None,
}
DEFAULT_RANGE = "24h"
MAX_VALUE = 200  # agent and model names are at most 200 characters in a manifest
_CONTROL = re.compile("[\x00-\x1f\x7f]")


class FilterError(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


@dataclass(frozen=True)
class Filters:
    agent: str = ""
    model: str = ""
    range: str = DEFAULT_RANGE
    since: datetime | None = None
    until: datetime | None = None
    # Raw since/until as typed, so the form shows back what the user entered.
    since_raw: str = ""
    until_raw: str = ""
    # When a named range was read: "the last 24h" ends then (until stays None: open-ended).
    as_of: datetime | None = None

    @property
    def start(self) -> datetime | None:
        return self.since

    @property
    def end(self) -> datetime | None:
        return self.until

    @property
    def span(self) -> timedelta | None:
        if self.since is None:
            return None
        return (self.until or self.as_of or timezone.now()) - self.since

    @property
    def since_input(self) -> str:
        """The start as a datetime-local input shows it (UTC, to the minute)."""
        return _local_input(self.since) if self.range == "custom" else ""

    @property
    def until_input(self) -> str:
        return _local_input(self.until) if self.range == "custom" else ""

    def chips(self) -> list[tuple[str, str, str]]:
        """The active filters as (label, value, querystring without it) for the filter bar,
        so what the URL says is always visible and each part can be removed on its own."""
        out = []
        if self.agent:
            out.append(("agent", self.agent, self.querystring(agent="")))
        if self.model:
            out.append(("model", self.model, self.querystring(model="")))
        if self.range == "custom":
            out.append(("from", self.since_raw or "the start", self.querystring(since="", until="")))
            if self.until_raw:
                out.append(("to", self.until_raw, self.querystring(until="")))
        elif self.range != DEFAULT_RANGE:
            out.append(("range", "all time" if self.range == "all" else f"last {self.range}",
                        self.querystring(range="")))
        return out

    def previous(self) -> Filters | None:
        """The period of the same length just before this one (for "against the previous period")."""
        span = self.span
        if span is None or self.since is None:
            return None
        return Filters(agent=self.agent, model=self.model, range="custom", since=self.since - span, until=self.since)

    def apply(
        self,
        qs: QuerySet[M],
        *,
        since_field: str = "started_at",
        until_field: str | None = None,
        agent_field: str = "agent",
        model_field: str = "model",
    ) -> QuerySet[M]:
        """Narrow ``qs`` to this time range, agent and model: the one place every page's
        filters meet the data. A run overlaps the range when it was last seen after its
        start and first seen before its end, hence the two time fields."""
        if self.since is not None:
            qs = qs.filter(**{f"{since_field}__gte": self.since})
        if self.until is not None:
            qs = qs.filter(**{f"{until_field or since_field}__lt": self.until})
        if self.agent:
            qs = qs.filter(**{agent_field: self.agent})
        if self.model:
            qs = qs.filter(**{model_field: self.model})
        return qs

    def params(self, **override: str) -> dict[str, str]:
        out = {"agent": self.agent, "model": self.model}
        if self.since_raw or self.until_raw:
            out.update({"since": self.since_raw, "until": self.until_raw})
        elif self.range != DEFAULT_RANGE:
            out["range"] = self.range
        out.update(override)
        return {k: v for k, v in out.items() if v}

    def querystring(self, **override: str) -> str:
        """``agent=..&model=..&range=..`` (empty values left out), without the ``?``."""
        return urlencode(self.params(**override))


def _local_input(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M") if moment else ""


def _time(raw: str, param: str, *, end: bool) -> datetime:
    """An ISO 8601 time, or a date (a date as ``until`` means the end of that day)."""
    message = f"{raw!r} is not an ISO 8601 date or time (e.g. 2026-11-29 or 2026-11-29T14:00Z)"
    try:  # Django's parsers raise ValueError for well-formed but impossible dates (month 13)
        # A bare date first: parse_datetime would read "2026-11-28" as its midnight.
        day = parse_date(raw) if len(raw) == 10 else None
        value = parse_datetime(raw) if day is None else None
    except ValueError:
        raise FilterError(param, message) from None
    # The same range as stored timestamps (ctxkit.manifest), checked before any
    # arithmetic: 9999-12-31 plus a day does not exist.
    out_of_range = FilterError(param, f"{raw!r} is outside {EARLIEST:%Y-%m-%d}..{LATEST:%Y-%m-%d}")
    if value is None:
        if day is None:
            raise FilterError(param, message)
        if not EARLIEST.year <= day.year < LATEST.year:
            raise out_of_range
        value = datetime(day.year, day.month, day.day) + (timedelta(days=1) if end else timedelta())
    if timezone.is_naive(value):
        value = timezone.make_aware(value, timezone.get_default_timezone())
    if not EARLIEST <= value <= LATEST:
        raise out_of_range
    return value


def text_param(query: QueryDict, param: str, limit: int = MAX_VALUE) -> str:
    """A text filter of the query string (an exact value), stripped; a FilterError when it is
    longer than ``limit`` or holds a control character (no stored value does)."""
    value = query.get(param, "").strip()
    if len(value) > limit:
        raise FilterError(param, f"at most {limit} characters")
    if _CONTROL.search(value):
        raise FilterError(param, "must not contain control characters")
    return value


def parse(query: QueryDict, *, now: datetime | None = None) -> Filters:
    """Read the filters from a query string; raise FilterError for a bad value."""
    agent = text_param(query, "agent")
    model = text_param(query, "model")
    since_raw = query.get("since", "").strip()
    until_raw = query.get("until", "").strip()
    key = query.get("range", "").strip()
    # A named range wins over since/until: the filter bar sends both, and choosing a range
    # there means "this range"; since/until alone (range left empty or "custom") is a
    # custom range.
    if key == "custom":
        key = ""
    if not key and (since_raw or until_raw):
        since = _time(since_raw, "since", end=False) if since_raw else None
        until = _time(until_raw, "until", end=True) if until_raw else None
        if since and until and until <= since:
            raise FilterError("until", "must be after since")
        return Filters(agent=agent, model=model, range="custom", since=since, until=until,
                       since_raw=since_raw, until_raw=until_raw)
    key = key or DEFAULT_RANGE
    if key not in RANGES:
        raise FilterError("range", f"{key!r} is not one of {', '.join(RANGES)}")
    span = RANGES[key]
    now = now or timezone.now()
    since = now - span if span is not None else None
    return Filters(agent=agent, model=model, range=key, since=since, as_of=now)


def bound_call(qs: QuerySet[M], filters: Filters, *, call: str = "call", own: str = "started_at") -> QuerySet[M]:
    """For a row that copies its call's time (``own``) and is joined to its call: bound the
    joined call by the range too and equate the two times. On PostgreSQL the calls table is
    partitioned by its time, and a join on the call's id alone reads every day's partition
    (the whole table); with constant bounds the planner keeps only the range's days."""
    qs = qs.filter(**{f"{call}__started_at": F(own)})
    if filters.since is not None:
        qs = qs.filter(**{f"{call}__started_at__gte": filters.since})
    if filters.until is not None:
        qs = qs.filter(**{f"{call}__started_at__lt": filters.until})
    return qs
