"""What every dashboard page shares: login, project membership, URL filters, the 400 page."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from manifests.models import Project
from manifests.selectors import filters as f
from manifests.selectors.projects import filter_options, project_for

NAV = [("overview", "Overview"), ("runs", "Runs"), ("evidence", "Evidence"), ("cache", "Cache"),
       ("compactions", "Compactions")]

Page = Callable[..., HttpResponse]


def bad_request(request: HttpRequest, param: str, message: str, *, project: Project | None = None) -> HttpResponse:
    return render(request, "manifests/bad_request.html", {"param": param, "message": message, "project": project},
                  status=400)


def project_page(view: Page) -> Page:
    """Login required; the project must be one of the user's (404 otherwise, so a guessed
    slug reveals nothing); the URL filters are parsed once (a bad one is a 400 naming it)."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, slug: str, *args: Any, **kwargs: Any) -> HttpResponse:
        project = project_for(request.user, slug)
        try:
            filters = f.parse(request.GET)
        except f.FilterError as exc:
            return bad_request(request, exc.param, exc.message, project=project)
        return view(request, project, filters, *args, **kwargs)

    return wrapper


def json_endpoint(view: Page) -> Page:
    """For the JSON endpoints the pages' scripts call: 401 / 404 as JSON, never a login redirect."""

    @wraps(view)
    def wrapper(request: HttpRequest, slug: str, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return JsonResponse({"error": "login required"}, status=401)
        try:
            project = project_for(request.user, slug)
        except Http404:
            return JsonResponse({"error": "no such project"}, status=404)
        return view(request, project, *args, **kwargs)

    return wrapper


def page(request: HttpRequest, template: str, project: Project, filters: f.Filters, active: str,
         context: dict[str, Any], *, keep: dict[str, str] | None = None) -> HttpResponse:
    """Render a dashboard page with the navigation and the filter bar.

    ``keep`` holds the page's own query parameters (a search, a selected run) that the
    filter form carries along so applying a filter keeps them.
    """
    qs = filters.querystring()
    base = {
        "project": project,
        "filters": filters,
        "options": filter_options(project),
        "ranges": list(f.RANGES),
        "default_range": f.DEFAULT_RANGE,
        "qs": qs,
        "qs_suffix": f"?{qs}" if qs else "",
        "nav": NAV,
        "active": active,
        "keep": {k: v for k, v in (keep or {}).items() if v},
    }
    return render(request, template, {**base, **context})
