"""The filtered calls list: what a chart bucket, a prefix hash or a cause stands for.

Every chart point or bar that stands for several calls links here with the filters that
select exactly those calls (a bucket is a since/until pair); the exports read the same
query, so "export what I see" means the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Exists, FilteredRelation, OuterRef, Q, QuerySet
from django.http import QueryDict

from manifests.models import Attribution, CacheEvent, Call, Project
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
# The sort columns that can be NULL (a call not analysed yet has no figures row); the others
# are ordered without NULLS LAST so that an index can serve them (sorting.Sort.order_by).
NULLABLE_SORTS = {"hit", "cost"}
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


def _figures_in(project: Project, filters: Filters) -> Q:
    cond = Q(figures__project=project)
    if filters.since is not None:
        cond &= Q(figures__started_at__gte=filters.since)
    if filters.until is not None:
        cond &= Q(figures__started_at__lt=filters.until)
    return cond


def calls_page(project: Project, filters: Filters, cq: CallQuery, sort: Sort, page: str | int | None) -> Page:
    """One page of the calls list, in two reads so that neither grows with the table:

    1. the page's (pk, started_at) pairs, in the sort's order: narrow rows (no call columns
       but the sort's), so sorting the range by a figure (hit rate, cost) sorts small tuples,
       and sorting by time reads the first 50 from the (project, started_at) index;
    2. those 50 calls with their run, figures and cache event, each from its own day's
       partition (PostgreSQL prunes on the ``started_at`` list).
    """
    keys = calls(project, filters, cq)
    columns = SORTS
    if SORTS[sort.column].startswith("figures__"):
        # Join only the range's figures rows (the figures table is not partitioned; its
        # (project, started_at) index bounds them): a plain join reads every figures row of
        # every project and time to hash them. Still a LEFT join: a call not analysed yet
        # has no figures row and sorts last. A call's figures carry its time.
        keys = keys.annotate(fig=FilteredRelation("figures", condition=_figures_in(project, filters)))
        columns = {**SORTS, sort.column: SORTS[sort.column].replace("figures__", "fig__", 1)}
    keys = keys.order_by(*sort.order_by(columns, nullable=NULLABLE_SORTS))
    result: Page[Any] = Paginator(keys.values_list("pk", "started_at"), CALLS_PER_PAGE).get_page(page)
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
