"""Projects a user may see, and the filter options of a project."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import Count, F, QuerySet
from django.http import Http404

from manifests.models import ApiKey, Membership, Project, Run


def projects_for(user: User | AnonymousUser) -> QuerySet[Project]:
    if isinstance(user, AnonymousUser):  # a member of nothing
        return Project.objects.none()
    return Project.objects.filter(members=user).annotate(run_count=Count("runs", distinct=True)).order_by("name")


def project_for(user: User | AnonymousUser, slug: str) -> Project:
    """The project if ``user`` is a member; a 404 otherwise, so a guessed slug does not
    reveal that the project exists."""
    if isinstance(user, AnonymousUser):
        raise Http404("no such project")
    membership = Membership.objects.select_related("project").filter(project__slug=slug, user=user).first()
    if membership is None:
        raise Http404("no such project")
    project = membership.project
    project.role = membership.role  # what the pages may offer this user (the settings link)
    return project


def project_settings(project: Project) -> dict[str, Any]:
    """What the settings page lists: keys (newest first, revoked last), members, webhook."""
    return {
        "keys": list(ApiKey.objects.filter(project=project).order_by(F("revoked_at").asc(nulls_first=True),
                                                                      "-created")),
        "members": list(Membership.objects.filter(project=project).select_related("user")
                        .order_by("user__username")),
    }


_PAIRS = """
WITH RECURSIVE pairs AS (
    (SELECT agent, model FROM manifests_run WHERE project_id = %s ORDER BY agent, model LIMIT 1)
    UNION ALL
    SELECT n.agent, n.model FROM pairs, LATERAL (
        SELECT agent, model FROM manifests_run
        WHERE project_id = %s AND (agent, model) > (pairs.agent, pairs.model)
        ORDER BY agent, model LIMIT 1) n
)
SELECT agent, model FROM pairs
"""


def filter_options(project: Project) -> dict[str, list[str]]:
    """Agents and models seen in the project, for the filter bar. Read from runs, which
    are far fewer than calls."""
    if connection.vendor == "postgresql":
        # A loose index scan: one index probe per distinct pair, however many runs there are
        # (a DISTINCT over the runs grows with them, and runs on every dashboard page).
        with connection.cursor() as cursor:
            cursor.execute(_PAIRS, [project.pk, project.pk])
            pairs = set(cursor.fetchall())
    else:
        pairs = set(Run.objects.filter(project=project).values_list("agent", "model").distinct().order_by())
    return {
        "agents": sorted({a for a, _ in pairs}),
        "models": sorted({m for _, m in pairs if m}),
    }


# The runs list offers at most this many folders and branches (a value past them is reached from
# a run's row, which links to its own).
MAX_PLACES = 200
# One column's distinct non-empty values by a loose index scan (run_project_cwd_recent,
# run_project_branch_recent lead with the project and the column).
_DISTINCT = """
WITH RECURSIVE v AS (
    (SELECT {col} FROM manifests_run WHERE project_id = %s AND {col} > '' ORDER BY {col} LIMIT 1)
    UNION ALL
    SELECT n.{col} FROM v, LATERAL (
        SELECT {col} FROM manifests_run WHERE project_id = %s AND {col} > v.{col} ORDER BY {col} LIMIT 1) n
)
SELECT {col} FROM v LIMIT %s
"""


def place_options(project: Project) -> dict[str, list[str]]:
    """The folders (cwd) and git branches the project's runs name, in order, for the runs list's
    filter: at most MAX_PLACES of each."""
    out: dict[str, list[str]] = {}
    for name, column in (("folders", "cwd"), ("branches", "git_branch")):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(_DISTINCT.format(col=column), [project.pk, project.pk, MAX_PLACES])
                out[name] = [row[0] for row in cursor.fetchall()]
        else:
            out[name] = list(Run.objects.filter(project=project).exclude(**{column: ""})
                             .values_list(column, flat=True).distinct().order_by(column)[:MAX_PLACES])
    return out
