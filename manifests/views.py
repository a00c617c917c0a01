"""Dashboard pages. Thin: check access, call a selector, render."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from manifests import selectors
from manifests.models import Project


def _project_for(request: HttpRequest, slug: str) -> Project:
    # A user sees only projects they are a member of; others get a 404, not a 403,
    # so a guessed slug does not reveal that the project exists.
    return get_object_or_404(Project, slug=slug, members=request.user)


@login_required
def index(request: HttpRequest) -> HttpResponse:
    projects = selectors.projects_for(request.user)
    return render(request, "manifests/index.html", {"projects": projects})


@login_required
def project_runs(request: HttpRequest, slug: str) -> HttpResponse:
    project = _project_for(request, slug)
    runs = selectors.recent_runs(project)
    return render(request, "manifests/runs.html", {"project": project, "runs": runs})


@login_required
def run_detail(request: HttpRequest, slug: str, run_id: str) -> HttpResponse:
    project = _project_for(request, slug)
    run = get_object_or_404(project.runs, run_id=run_id)
    return render(request, "manifests/run.html", {"project": project, "run": run, "calls": selectors.run_calls(run)})


@login_required
def call_detail(request: HttpRequest, slug: str, call_id: str) -> HttpResponse:
    project = _project_for(request, slug)
    call = selectors.call_with_children(project, call_id)
    return render(request, "manifests/call.html", {"project": project, "call": call})
