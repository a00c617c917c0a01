"""Compaction review: events filterable by failed invariant, with r, d and the fields lost.

Every read is bounded by the compactions' own ``started_at`` (the call's time, copied; the
partition key on PostgreSQL), so only the range's day partitions are read, and the list is
ordered by it (the index ``compaction_project_time``): the page reads 50 rows whatever the
table holds. The call is joined for its id and agent with its own time too, so that join
reads one day's partition per row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, OneToOneRel, OuterRef, Prefetch, Q, QuerySet, prefetch_related_objects

from manifests.models import Call, Compaction, CompactionFigures, Invariant, Project
from manifests.selectors.filters import Filters, bound_call

PER_PAGE = 50


def _base(project: Project, filters: Filters) -> QuerySet[Compaction]:
    qs = filters.apply(Compaction.objects.filter(project=project), agent_field="call__agent",
                       model_field="call__model")
    if filters.agent or filters.model:
        # The joined call has the compaction's time: bound it too, so that only the range's
        # call partitions are read (the equality alone prunes nothing at plan time).
        qs = bound_call(qs, filters)
    return qs


def _invariants(filters: Filters) -> QuerySet[Invariant]:
    """Invariants of the range's partitions (an invariant has its compaction's time). Only
    the time range: invariants have no agent or model; callers narrow by compaction."""
    return replace(filters, agent="", model="").apply(Invariant.objects.all())


def events(project: Project, filters: Filters, *, failed: str = "", only_failed: bool = False,
           page: str | int | None = None) -> Page[Compaction]:
    """One page of compactions, latest first, with their call (and run), figures and invariants.

    The page is chosen from the compactions alone; its calls, figures and invariants are then
    read for those 50 rows, each from its own day's partition (``started_at IN`` the page's
    times), never joined over the whole range or table."""
    qs = _base(project, filters)
    if failed:
        # EXISTS, not a join: one row per compaction, so no DISTINCT over every column.
        qs = qs.filter(Exists(_invariants(filters).filter(compaction=OuterRef("pk"), started_at=OuterRef("started_at"),
                                                          name=failed, ok=False)))
    elif only_failed:
        qs = qs.filter(failed_invariants__gt=0)
    result = Paginator(qs.order_by("-started_at", "-pk"), PER_PAGE).get_page(page)
    rows = list(result.object_list)
    if rows:
        times = {c.started_at for c in rows}
        calls = (Call.objects.filter(pk__in={c.call_id for c in rows}, started_at__in=times)
                 .select_related("run").defer("raw", "prefix_segments", "warnings"))
        by_pk = {call.pk: call for call in calls}
        figures = {f.compaction_id: f for f in CompactionFigures.objects.filter(compaction__in=[c.pk for c in rows])}
        figures_rel = cast(OneToOneRel, Compaction._meta.get_field("figures"))
        for c in rows:
            c.call = by_pk[c.call_id]
            figures_rel.set_cached_value(c, figures.get(c.pk))  # None too: no query per row later
        prefetch_related_objects(rows, Prefetch(
            "invariants", queryset=Invariant.objects.filter(started_at__in=times).order_by("pk")))
    result.object_list = rows
    return result


def failure_counts(project: Project, filters: Filters) -> list[dict[str, Any]]:
    """How many compactions failed each invariant in the range (the filter's choices)."""
    return list(
        _invariants(filters).filter(compaction__in=_base(project, filters).values("pk"), ok=False)
        .values("name").annotate(n=Count("compaction", distinct=True)).order_by("-n", "name")
    )


def totals(project: Project, filters: Filters) -> dict[str, int]:
    return _base(project, filters).aggregate(total=Count("pk"), failed=Count("pk", filter=Q(failed_invariants__gt=0)))
