"""The call view and its what-if replay endpoint."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from ctxkit.models import WINDOW_ASSUMED
from manifests import replay
from manifests.models import Attribution, Project
from manifests.selectors import calls as calls_sel
from manifests.selectors import window as window_sel
from manifests.selectors.filters import Filters
from manifests.views.common import json_endpoint, page, project_page

FOLD_NOT_SENT_OVER = 12


@project_page
def call_detail(request: HttpRequest, project: Project, filters: Filters, call_id: str) -> HttpResponse:
    call = calls_sel.call_for_page(project, call_id)
    items = calls_sel.item_rows(call)
    figures = calls_sel.call_figures(call)
    cache_event = calls_sel.cache_event(call)
    attributions = calls_sel.attributions(call)
    # The cause column is for evidence that did not reach the model; risks have their panel.
    by_evidence: dict[int, Attribution] = {}
    by_key: dict[str, Attribution] = {}
    for a in attributions:
        if a.is_risk:
            continue
        if a.evidence_id:
            by_evidence.setdefault(a.evidence_id, a)
        by_key.setdefault(a.evidence_key, a)
    evidence = [{"e": e, "attribution": by_evidence.get(e.pk) or by_key.get(e.key)} for e in call.evidence.all()]
    compactions = calls_sel.compaction_cards(call)
    ordered = calls_sel.context_order(items)
    allocation = calls_sel.allocation(call, ordered, effective_limit=figures.effective_limit if figures else None)
    diff = calls_sel.diff_with_previous(call, items)
    # Many items not sent (folded into a summary, cleared, dropped) fold under one line.
    not_sent = sum(1 for i in ordered if not i.in_context)
    fold_at = len(ordered) - not_sent if not_sent > FOLD_NOT_SENT_OVER else None
    qs = filters.querystring()
    whatif = {
        "url": reverse("call-whatif", args=[project.slug]),
        "call_id": call.call_id,
        "budget": call.window,
        "reserve": call.output_reserve,
        "margin": call.safety_margin,
        "min_budget": call.safety_margin + 1,
        "max_budget": max(call.window * 3, 2000),
        # About 250 stops along the slider; the number box beside it takes any token count.
        "step": max(1, max(call.window * 3, 2000) // 250),
    }
    return page(request, "manifests/call.html", project, filters, "call", {
        "call": call,
        "items": ordered,
        "fold_at": fold_at,
        "not_sent": not_sent,
        "evidence": evidence,
        "risks": [a for a in attributions if a.is_risk],
        "compactions": compactions,
        "rereads": calls_sel.rereads(call),
        "figures": figures,
        "cache_event": cache_event,
        "allocation": allocation,
        "window_panel": window_sel.call_window(call, items),
        "window_assumed": any(str(w).startswith(WINDOW_ASSUMED) for w in call.warnings or ()),
        "diff": diff,
        "next_call": calls_sel.next_call(call),
        "whatif": whatif,
        "qs": qs,
        # Reversed once here, not once per item row in the template.
        "evidence_url": reverse("evidence", args=[project.slug]),
        "qs_amp": f"&{qs}" if qs else "",
    })


@require_GET
@json_endpoint
def call_whatif(request: HttpRequest, project: Project) -> HttpResponse:
    """``?call=<call_id>&budget=&reserve=&margin=``: the call's items allocated again by
    ctxkit's allocator; see manifests/replay.py."""
    call_id = request.GET.get("call", "")
    if not call_id:
        return JsonResponse({"error": "call is required", "errors": [{"path": "call", "message": "required"}]},
                            status=400)
    try:
        call = calls_sel.call_with_children(project, call_id)
    except Http404:  # answered in JSON like the rest of this endpoint
        return JsonResponse({"error": "no such call"}, status=404)
    try:
        params = replay.parse_params(request.GET, call)
    except replay.ReplayError as exc:
        return JsonResponse({"error": str(exc), "errors": [{"path": exc.param, "message": exc.message}]},
                            status=400)
    return JsonResponse(replay.replay(call, list(call.items.all()), list(call.evidence.all()), params))
