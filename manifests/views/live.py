"""The live tail: the page (first paint on the server) and the poll its script calls."""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlencode

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_GET

from manifests.models import Project
from manifests.selectors import call_list, live
from manifests.selectors import filters as f
from manifests.views.common import json_endpoint, page, project_page

# How often the page asks for new calls, in milliseconds (the page's promise: a call shows
# at most two seconds after ingest answered).
POLL_MS = 1000


@project_page
def live_page(request: HttpRequest, project: Project, filters: f.Filters) -> HttpResponse:
    cq = call_list.parse_call_query(request.GET)
    arrivals = live.arrivals(project, filters, cq)
    own = cq.params()
    feed = reverse("live-feed", args=[project.slug])
    query = "&".join(p for p in (filters.querystring(), urlencode(own)) if p)
    return page(request, "manifests/live.html", project, filters, "live", {
        "arrivals": arrivals,
        "cq": cq,
        "window": live.WINDOW,
        "lookback_hours": int(live.LOOKBACK.total_seconds() // 3600),
        "feed_url": f"{feed}?{query}" if query else feed,
        "poll_ms": POLL_MS,
        "calls_qs": query,
    }, keep=own)


@require_GET
@json_endpoint
def live_feed(request: HttpRequest, project: Project) -> HttpResponse:
    """``?after=<cursor>`` and the page's filters: the calls that arrived after the cursor,
    newest first (at most live.WINDOW), and the next cursor. Answers 304 to an
    ``If-None-Match`` naming the same answer."""
    try:
        filters = f.parse(request.GET)
        cq = call_list.parse_call_query(request.GET)
        after = live.parse_cursor(request.GET.get("after"))
    except f.FilterError as exc:
        return JsonResponse({"error": str(exc), "errors": [{"path": exc.param, "message": exc.message}]},
                            status=400)
    arrivals = live.arrivals(project, filters, cq, after=after)
    body = json.dumps({"cursor": str(arrivals.cursor), "truncated": arrivals.truncated, "calls": arrivals.rows},
                      cls=DjangoJSONEncoder, separators=(",", ":"))
    etag = '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"'
    if etag in request.headers.get("If-None-Match", ""):
        response = HttpResponse(status=304)
    else:
        response = HttpResponse(body, content_type="application/json")
    response["ETag"] = etag
    # A member's data: kept by the browser only, and asked for again every time.
    patch_cache_control(response, private=True, no_cache=True)
    return response
