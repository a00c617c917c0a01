"""Two calls side by side (?a=<call>&b=<call>; b alone compares it with its previous step)."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse

from manifests.models import Project
from manifests.selectors import compare as compare_sel
from manifests.selectors.filters import Filters
from manifests.views.common import bad_request, page, project_page


@project_page
def compare(request: HttpRequest, project: Project, filters: Filters) -> HttpResponse:
    a_id = request.GET.get("a", "").strip()
    b_id = request.GET.get("b", "").strip()
    for param, value in (("a", a_id), ("b", b_id)):
        if len(value) > 200:
            return bad_request(request, param, "at most 200 characters", project=project)
    if not b_id:
        return bad_request(request, "b", "name the call to compare (?b=<call id>, and ?a=<call id> to compare "
                                         "it with another call than its previous step)", project=project)
    b = compare_sel.call_of(project, b_id)
    if b is None:
        raise Http404(f"No call {b_id!r} in this project.")
    if a_id:
        a = compare_sel.call_of(project, a_id)
        if a is None:
            raise Http404(f"No call {a_id!r} in this project.")
    else:
        a = compare_sel.default_before(b)
    context: dict[str, Any] = {"a_id": a_id or (a.call_id if a else ""), "b_id": b_id, "b": b, "a": a}
    if a is not None:
        context["cmp"] = compare_sel.compare(a, b)
    return page(request, "manifests/compare.html", project, filters, "compare", context,
                keep={"a": context["a_id"], "b": b_id})
