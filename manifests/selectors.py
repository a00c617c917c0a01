"""Reads for the dashboard."""

from __future__ import annotations

from django.db.models import Count, Prefetch, QuerySet
from django.http import Http404

from manifests.models import Call, Compaction, Item, Project, Run


def projects_for(user) -> QuerySet[Project]:
    return Project.objects.filter(members=user).annotate(run_count=Count("runs", distinct=True)).order_by("name")


def recent_runs(project: Project, limit: int = 200) -> QuerySet[Run]:
    return project.runs.annotate(call_count=Count("calls")).order_by("-last_seen")[:limit]


def run_calls(run: Run) -> QuerySet[Call]:
    return run.calls.order_by("step", "started_at")


def call_with_children(project: Project, call_id: str) -> Call:
    call = (
        Call.objects.filter(project=project, call_id=call_id)
        .select_related("run")
        .prefetch_related(
            Prefetch("items", queryset=Item.objects.order_by("ordinal")),
            "evidence",
            Prefetch("compactions", queryset=Compaction.objects.prefetch_related("invariants")),
            "context_edits",
        )
        .first()
    )
    if call is None:
        raise Http404("no such call")
    return call
