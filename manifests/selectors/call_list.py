"""The filtered calls list: what a chart bucket, a prefix hash or a cause stands for.

Every chart point or bar that stands for several calls links here with the filters that
select exactly those calls (a bucket is a since/until pair); the exports read the same
query, so "export what I see" means the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Exists, F, OuterRef, QuerySet
from django.http import QueryDict

from manifests.models import Attribution, CacheEvent, Call, CallFigures, Project
from manifests.selectors.filters import MAX_VALUE, FilterError, Filters
from manifests.selectors.sorting import Sort

CALLS_PER_PAGE = 50
# Column -> field, for ?sort= on the calls list.
SORTS = {
    "time": "started_at",
    "call": "call_id",
    "run": "run__run_id",
    "step": "step",
    "agent": "agent",
    "model": "model",
    "input": "input_tokens",
    "hit": "figures__cache_hit_ratio",
    "missing": "evidence_missing",
    "cost": "figures__cost",
}
DEFAULT_SORT = "-time"
CACHE_CAUSES = [c for c, _ in CacheEvent.CAUSES]
MISSING_CAUSES = [c for c, _ in Attribution.CAUSES]


@dataclass(frozen=True)
class CallQuery:
    """The calls list's own filters, beside the dashboard's agent / model / time range."""

    run: str = ""
    prefix: str = ""  # a prefix hash
    cache: str = ""  # a cache event cause (prefix_changed, ttl_expired, ...)
    cause: str = ""  # a missing-evidence cause (budget, truncated, ...)
    evidence: str = ""  # an evidence key that was missing
    status: str = ""  # the manifest's outcome status (ok, error, ...)

    def params(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}

    @property
    def active(self) -> bool:
        return bool(self.params())


def parse_call_query(query: QueryDict) -> CallQuery:
    values = {f.name: query.get(f.name, "").strip() for f in fields(CallQuery)}
    for name, value in values.items():
        if len(value) > MAX_VALUE:
            raise FilterError(name, f"at most {MAX_VALUE} characters")
    if values["cache"] and values["cache"] not in CACHE_CAUSES:
        raise FilterError("cache", f"{values['cache']!r} is not one of {', '.join(CACHE_CAUSES)}")
    if values["cause"] and values["cause"] not in MISSING_CAUSES:
        raise FilterError("cause", f"{values['cause']!r} is not one of {', '.join(MISSING_CAUSES)}")
    return CallQuery(**values)


def calls(project: Project, filters: Filters, cq: CallQuery) -> QuerySet[Call]:
    """The calls the dashboard filters and ``cq`` select (unordered)."""
    qs = filters.apply(Call.objects.filter(project=project))
    if cq.run:
        qs = qs.filter(run__run_id=cq.run)
    if cq.prefix:
        qs = qs.filter(prefix_hash=cq.prefix)
    if cq.status:
        qs = qs.filter(status=cq.status)
    if cq.cache:
        qs = qs.filter(Exists(CacheEvent.objects.filter(call=OuterRef("pk"), cause=cq.cache)))
    if cq.cause or cq.evidence:
        attributions = Attribution.objects.filter(call=OuterRef("pk"))
        if cq.cause:
            attributions = attributions.filter(cause=cq.cause)
        if cq.evidence:
            attributions = attributions.filter(evidence_key=cq.evidence)
        qs = qs.filter(Exists(attributions))
    return qs


class _FigureOrder:
    """The calls of a range ordered by one of their stored figures, as (pk, started_at) pairs,
    for the Paginator: a count and slices.

    Calls whose figure is stored come first, read from the figures table in the order of its
    (project, figure, call) index, so a page costs what it shows, not what the range holds;
    the range and the other filters are checked on the way. Calls without the figure (not
    analysed yet, or no input for the hit rate) follow in pk order, as NULLS LAST would put
    them. The result is the order of ``sort.order_by`` on the calls with their figures joined.
    """

    def __init__(self, project: Project, filters: Filters, cq: CallQuery, sort: Sort) -> None:
        field = SORTS[sort.column].removeprefix("figures__")
        selected = calls(project, filters, cq)
        figures = CallFigures.objects.filter(project=project, **{f"{field}__isnull": False})
        if filters.since is not None:
            figures = figures.filter(started_at__gte=filters.since)
        if filters.until is not None:
            figures = figures.filter(started_at__lt=filters.until)
        if filters.agent or filters.model or cq.active:
            figures = figures.filter(Exists(selected.filter(pk=OuterRef("call_id"), started_at=OuterRef("started_at"))))
        order = (F(field).desc(), "-call_id") if sort.descending else (F(field).asc(), "call_id")
        self.figured = figures.order_by(*order).values_list("call_id", "started_at")
        unfigured = ~Exists(CallFigures.objects.filter(call_id=OuterRef("pk"), **{f"{field}__isnull": False}))
        self.rest = selected.filter(unfigured).order_by("-pk" if sort.descending else "pk").values_list(
            "pk", "started_at")
        self.selected = selected

    def count(self) -> int:
        return self.selected.count()

    def __getitem__(self, window: slice) -> list[tuple[int, Any]]:
        start, stop = window.start or 0, window.stop
        head = list(self.figured[start:stop])
        if stop is not None and len(head) == stop - start:
            return head
        figured = start + len(head) if head else self.figured.count()
        skip = max(0, start - figured)
        rest = self.rest[skip:] if stop is None else self.rest[skip:skip + stop - start - len(head)]
        return head + list(rest)


def calls_page(project: Project, filters: Filters, cq: CallQuery, sort: Sort, page: str | int | None) -> Page[Call]:
    """One page of the calls list, in two reads so that neither grows with the table:

    1. the page's (pk, started_at) pairs, in the sort's order: by time from the calls'
       (project, started_at) index, by a figure (hit rate, cost) from the figures' index on
       that figure (:class:`_FigureOrder`);
    2. those 50 calls with their run, figures and cache event, each from its own day's
       partition (PostgreSQL prunes on the ``started_at`` list).
    """
    keys: Any
    if SORTS[sort.column].startswith("figures__"):
        keys = _FigureOrder(project, filters, cq, sort)
    else:
        # No call column sorted here is NULL: ordered without NULLS LAST, an index serves it.
        keys = calls(project, filters, cq).order_by(*sort.order_by(SORTS, nullable=())).values_list(
            "pk", "started_at")
    result: Page[Any] = Paginator(keys, CALLS_PER_PAGE).get_page(page)
    pairs = list(result.object_list)
    rows: list[Call] = []
    if pairs:
        by_pk = {
            c.pk: c
            for c in Call.objects.filter(pk__in=[pk for pk, _ in pairs], started_at__in={at for _, at in pairs})
            .select_related("run", "figures", "cache_event")
            .defer("raw", "prefix_segments", "warnings")
        }
        rows = [by_pk[pk] for pk, _ in pairs if pk in by_pk]
    result.object_list = rows
    return result
