"""The watched facts of a project (settings page, API), in the order they were added."""

from __future__ import annotations

from manifests.models import Project, WatchedFact


def facts_of(project: Project) -> list[WatchedFact]:
    return list(WatchedFact.objects.filter(project=project).order_by("pk"))
