"""What every dashboard page shares: login, project membership, URL filters, the 400 page."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.response import HttpResponseBase
from django.shortcuts import render

from manifests.models import Project
from manifests.selectors import filters as f
from manifests.selectors.projects import filter_options, project_for
from manifests.views.registry import BY_NAME, TABS

PRESETS = ("1h", "24h", "7d", "30d")

# A page's view: a response, or a streamed one (the exports).
Page = Callable[..., HttpResponseBase]


def bad_request(request: HttpRequest, param: str, message: str, *, project: Project | None = None) -> HttpResponse:
    return render(request, "manifests/bad_request.html", {"param": param, "message": message, "project": project},
                  status=400)


def not_found(request: HttpRequest, message: str, *, project: Project | None = None) -> HttpResponse:
    """The app's 404 page, rendered here rather than left to Django so that it is the same
    page with DEBUG on (Django's debug 404 would otherwise replace it)."""
    return render(request, "404.html", {"message": message, "project": project}, status=404)


def project_page(view: Page) -> Page:
    """Login required; the project must be one of the user's (404 otherwise, so a guessed
    slug reveals nothing); the URL filters are parsed once (a bad one is a 400 naming it).
    A view's Http404 (an unknown run or call) is answered with the app's 404 page."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, slug: str, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            project = project_for(request.user, slug)
        except Http404:
            return not_found(request, "No such project, or you are not one of its members.")
        try:
            filters = f.parse(request.GET)
        except f.FilterError as exc:
            return bad_request(request, exc.param, exc.message, project=project)
        try:
            return view(request, project, filters, *args, **kwargs)
        except f.FilterError as exc:  # a page's own parameter (sort, cause, ...)
            return bad_request(request, exc.param, exc.message, project=project)
        except Http404 as exc:
            return not_found(request, str(exc) or "Not found.", project=project)

    return wrapper


def json_endpoint(view: Page) -> Page:
    """For the JSON endpoints the pages' scripts call: 401 / 404 as JSON, never a login redirect."""

    @wraps(view)
    def wrapper(request: HttpRequest, slug: str, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not request.user.is_authenticated:
            return JsonResponse({"error": "login required"}, status=401)
        try:
            project = project_for(request.user, slug)
        except Http404:
            return JsonResponse({"error": "no such project"}, status=404)
        return view(request, project, *args, **kwargs)

    return wrapper


def nav(name: str) -> dict[str, Any]:
    """The nav's context for the page registered as ``name`` (views/registry.py): the tabs and
    the one it lights."""
    return {"nav": TABS, "active": BY_NAME[name].tab}


def page(request: HttpRequest, template: str, project: Project, filters: f.Filters, name: str,
         context: dict[str, Any], *, keep: dict[str, str] | None = None) -> HttpResponse:
    """Render the dashboard page registered as ``name`` with the navigation and the filter bar.

    ``keep`` holds the page's own query parameters (a search, a selected run) that the
    filter form carries along so applying a filter keeps them.
    """
    tabs = nav(name)
    qs = filters.querystring()
    options = filter_options(project)
    # The filter bar shows what the URL says, even a value with no data (agent=nobody).
    for name, value in (("agents", filters.agent), ("models", filters.model)):
        if value and value not in options[name]:
            options[name] = [value, *options[name]]
    keep = {k: v for k, v in (keep or {}).items() if v}
    kept = urlencode(keep)

    def with_keep(querystring: str) -> str:
        return "&".join(part for part in (querystring, kept) if part)

    base = {
        "project": project,
        "filters": filters,
        "options": options,
        "ranges": list(f.RANGES),
        "default_range": f.DEFAULT_RANGE,
        "qs": qs,
        "qs_suffix": f"?{qs}" if qs else "",
        **tabs,
        "keep": keep,
        "preset_ranges": [{"label": f"last {r}", "active": filters.range == r,
                           "qs": with_keep(filters.querystring(range=r, since="", until=""))} for r in PRESETS],
        "filter_chips": [(label, value, with_keep(without)) for label, value, without in filters.chips()],
    }
    return render(request, template, {**base, **context})
