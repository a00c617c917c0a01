"""The top bar's search and the filtered calls list that charts and searches lead to."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from manifests.models import Project
from manifests.selectors import call_list
from manifests.selectors import search as search_sel
from manifests.selectors.filters import Filters
from manifests.selectors.sorting import parse_sort
from manifests.views.common import bad_request, page, project_page


@project_page
def search(request: HttpRequest, project: Project, filters: Filters) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    if len(query) > search_sel.MAX_QUERY:
        return bad_request(request, "q", f"at most {search_sel.MAX_QUERY} characters", project=project)
    matches = search_sel.find(project, query, filters)
    target = search_sel.destination(matches)
    if target is not None:
        return HttpResponseRedirect(target)
    return page(request, "manifests/search.html", project, filters, "search",
                {"query": query, "find_query": query, "matches": matches,
                 "ref_scan_calls": search_sel.REF_SCAN_CALLS}, keep={"q": query})


@project_page
def calls(request: HttpRequest, project: Project, filters: Filters) -> HttpResponse:
    cq = call_list.parse_call_query(request.GET)
    sort = parse_sort(request.GET.get("sort"), call_list.SORTS, call_list.DEFAULT_SORT)
    result = call_list.calls_page(project, filters, cq, sort, request.GET.get("page"))
    export_qs = "&".join(p for p in (filters.querystring(), urlencode(cq.params())) if p)
    return page(request, "manifests/calls.html", project, filters, "calls", {
        "page_obj": result,
        "cq": cq,
        "sort": sort,
        "export_qs": export_qs,
    }, keep={**cq.params(), "sort": request.GET.get("sort", "")})
