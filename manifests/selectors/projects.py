"""Projects a user may see, and the filter options of a project."""

from __future__ import annotations

from django.db.models import Count, QuerySet
from django.http import Http404

from manifests.models import Project, Run


def projects_for(user) -> QuerySet[Project]:
    return Project.objects.filter(members=user).annotate(run_count=Count("runs", distinct=True)).order_by("name")


def project_for(user, slug: str) -> Project:
    """The project if ``user`` is a member; a 404 otherwise, so a guessed slug does not
    reveal that the project exists."""
    project = Project.objects.filter(slug=slug, members=user).first()
    if project is None:
        raise Http404("no such project")
    return project


def filter_options(project: Project) -> dict[str, list[str]]:
    """Agents and models seen in the project, for the filter bar. Read from runs, which
    are far fewer than calls."""
    runs = Run.objects.filter(project=project)
    return {
        "agents": sorted(set(runs.values_list("agent", flat=True).distinct())),
        "models": sorted({m for m in runs.values_list("model", flat=True).distinct() if m}),
    }
