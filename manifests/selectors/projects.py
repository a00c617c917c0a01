"""Projects a user may see, and the filter options of a project."""

from __future__ import annotations

from django.db.models import Count, F, QuerySet
from django.http import Http404

from manifests.models import ApiKey, Membership, Project, Run


def projects_for(user) -> QuerySet[Project]:
    return Project.objects.filter(members=user).annotate(run_count=Count("runs", distinct=True)).order_by("name")


def project_for(user, slug: str) -> Project:
    """The project if ``user`` is a member; a 404 otherwise, so a guessed slug does not
    reveal that the project exists."""
    membership = Membership.objects.select_related("project").filter(project__slug=slug, user=user).first()
    if membership is None:
        raise Http404("no such project")
    project = membership.project
    project.role = membership.role  # what the pages may offer this user (the settings link)
    return project


def project_settings(project: Project) -> dict:
    """What the settings page lists: keys (newest first, revoked last), members, webhook."""
    return {
        "keys": list(ApiKey.objects.filter(project=project).order_by(F("revoked_at").asc(nulls_first=True),
                                                                      "-created")),
        "members": list(Membership.objects.filter(project=project).select_related("user")
                        .order_by("user__username")),
    }


def filter_options(project: Project) -> dict[str, list[str]]:
    """Agents and models seen in the project, for the filter bar. Read from runs, which
    are far fewer than calls."""
    pairs = set(Run.objects.filter(project=project).values_list("agent", "model").distinct().order_by())
    return {
        "agents": sorted({a for a, _ in pairs}),
        "models": sorted({m for _, m in pairs if m}),
    }
