"""Compaction review: events filterable by failed invariant, with r, d and the fields lost."""

from __future__ import annotations

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q

from manifests.models import Compaction, Invariant, Project
from manifests.selectors.filters import Filters

PER_PAGE = 50


def _base(project: Project, filters: Filters):
    qs = Compaction.objects.filter(project=project)
    qs = filters.apply(qs, since_field="call__started_at", agent_field="call__agent", model_field="call__model")
    return qs


def events(project: Project, filters: Filters, *, failed: str = "", only_failed: bool = False,
           page: str | int | None = None) -> Page:
    qs = _base(project, filters)
    if failed:
        qs = qs.filter(invariants__name=failed, invariants__ok=False)
    elif only_failed:
        qs = qs.filter(failed_invariants__gt=0)
    qs = (qs.select_related("call", "call__run", "figures")
          .prefetch_related("invariants").order_by("-call__started_at", "-pk").distinct())
    return Paginator(qs, PER_PAGE).get_page(page)


def failure_counts(project: Project, filters: Filters) -> list[dict]:
    """How many compactions failed each invariant in the range (the filter's choices)."""
    return list(
        Invariant.objects.filter(compaction__in=_base(project, filters), ok=False)
        .values("name").annotate(n=Count("compaction", distinct=True)).order_by("-n", "name")
    )


def totals(project: Project, filters: Filters) -> dict[str, int]:
    return _base(project, filters).aggregate(total=Count("pk"), failed=Count("pk", filter=Q(failed_invariants__gt=0)))
