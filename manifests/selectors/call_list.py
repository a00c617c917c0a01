"""The filtered calls list: what a chart bucket, a prefix hash or a cause stands for.

Every chart point or bar that stands for several calls links here with the filters that
select exactly those calls (a bucket is a since/until pair); the exports read the same
query, so "export what I see" means the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from django.core.paginator import Page, Paginator
from django.db.models import Exists, OuterRef, QuerySet
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


def calls_page(project: Project, filters: Filters, cq: CallQuery, sort: Sort, page: str | int | None) -> Page:
    qs = (
        calls(project, filters, cq)
        .select_related("run", "figures", "cache_event")
        .defer("raw", "prefix_segments", "warnings")
        .order_by(*sort.order_by(SORTS))
    )
    return Paginator(qs, CALLS_PER_PAGE).get_page(page)
