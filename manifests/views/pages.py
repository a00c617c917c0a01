"""Overview, runs, run, evidence triage, cache and compaction review pages."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from ctxkit.manifest import INVARIANT_NAMES
from manifests.models import Project, Rollup, Run
from manifests.selectors import cache as cache_sel
from manifests.selectors import compactions as compaction_sel
from manifests.selectors import evidence as evidence_sel
from manifests.selectors import overview as overview_sel
from manifests.selectors import runs as runs_sel
from manifests.selectors import savings as savings_sel
from manifests.selectors import series as series_sel
from manifests.selectors import window as window_sel
from manifests.selectors.filters import Filters
from manifests.selectors.projects import place_options, projects_for
from manifests.selectors.sorting import parse_sort, sort_list
from manifests.views.common import bad_request, page, project_page

KIND_ORDER = ["system", "constraint", "task", "tools", "memory", "summary", "history", "retrieval", "example",
              "state", "tool_result", "user", "other"]


def call_url(slug: str, call_id: str, qs: str = "") -> str:
    return reverse("call-detail", args=[slug, call_id]) + (f"?{qs}" if qs else "")


# What reverse() leaves unquoted in a path (django.urls.resolvers: RFC 3986 sub-delimiters and "/~:@").
PATH_SAFE = "!$&'()*+,;=/~:@"


def call_linker(slug: str, qs: str = "") -> Callable[[str], str]:
    """call_url for many calls of one page: reverse() once, then quote each id the way reverse()
    does (a chart links up to 5,000 calls, and reverse() per call would dominate the page)."""
    prefix = reverse("calls", args=[slug])
    suffix = f"/?{qs}" if qs else "/"
    return lambda call_id: prefix + quote(call_id, safe=PATH_SAFE) + suffix


def calls_url(slug: str, filters: Filters, **params: str) -> str:
    """The filtered calls list: the page's filters plus ``params``."""
    query = filters.querystring(**params)
    return reverse("calls", args=[slug]) + (f"?{query}" if query else "")


def bucket_base(slug: str, filters: Filters, **params: str) -> str:
    """The calls list with the page's agent and model and ``params``, ready for ``since=...``."""
    fixed = urlencode({k: v for k, v in {"agent": filters.agent, "model": filters.model, **params}.items() if v})
    return reverse("calls", args=[slug]) + "?" + (f"{fixed}&" if fixed else "")


def bucket_urls(slug: str, filters: Filters, starts: list[str], bucket: str, **params: str) -> list[str]:
    """For each bucket of a time series, the calls list of exactly that bucket (and ``params``)."""
    step = timedelta(hours=1) if bucket == Rollup.HOUR else timedelta(days=1)
    base = bucket_base(slug, filters, **params)
    out = []
    for start in starts:
        begin = datetime.fromisoformat(start).astimezone(UTC)
        out.append(f"{base}since={begin:%Y-%m-%dT%H:%M}Z&until={begin + step:%Y-%m-%dT%H:%M}Z")
    return out


@login_required
def index(request: HttpRequest) -> HttpResponse:
    return render(request, "manifests/index.html", {"projects": projects_for(request.user)})


@project_page
def overview(request: HttpRequest, project: Project, filters: Filters) -> HttpResponse:
    regressions = overview_sel.regressions(project, filters)
    charts = overview_sel.charts(project, filters, regressions)
    # Click-through: each bucket opens its calls; a prefix-change marker its prefix changes.
    charts["urls"] = bucket_urls(project.slug, filters, charts["x"], charts["bucket"])
    charts["prefix_urls"] = bucket_urls(project.slug, filters, charts["x"], charts["bucket"], cache="prefix_changed")
    charts["regression_urls"] = [call_url(project.slug, r.call.call_id, filters.querystring()) for r in regressions]
    return page(request, "manifests/overview.html", project, filters, "overview", {
        "cards": overview_sel.headline(project, filters),
        "charts": charts,
        "risk_count": sum(sum(v) for v in charts["risks"].values()),
        "regressions": savings_sel.with_savings(project, filters, regressions[:5]),
        "fixes": savings_sel.top_fixes(project, filters),
        "saving_days": savings_sel.SAVING_DAYS,
        "missing": overview_sel.recent_missing(project, filters),
        "compactions": compaction_sel.totals(project, filters),
        "failures": compaction_sel.failure_counts(project, filters),
        "lag": series_sel.lag(project),
    })


@project_page
def runs(request: HttpRequest, project: Project, filters: Filters) -> HttpResponse:
    sort = parse_sort(request.GET.get("sort"), runs_sel.RUN_SORTS, runs_sel.DEFAULT_RUN_SORT)
    place = runs_sel.parse_place(request.GET)
    result = runs_sel.runs_page(project, filters, request.GET.get("page"), sort, place)
    qs = filters.querystring()
    chart = [{"run": r.run_id, "agent": r.agent, "at": r.last_seen.isoformat(), "hit": r.hit_rate,
              "calls": r.call_count, "missing": r.evidence_missing, "failed": r.failed_compactions,
              "url": reverse("run-detail", args=[project.slug, r.run_id]) + (f"?{qs}" if qs else "")}
             for r in result.object_list]
    places = place_options(project)
    # The form shows what the URL says, even a value no run has.
    for name, value in (("folders", place.cwd), ("branches", place.branch)):
        if value and value not in places[name]:
            places[name] = [value, *places[name]]
    return page(request, "manifests/runs.html", project, filters, "runs",
                {"page_obj": result, "chart": chart, "sort": sort, "place": place, "places": places},
                keep={"sort": request.GET.get("sort", ""), "cwd": place.cwd, "branch": place.branch})


@project_page
def run_detail(request: HttpRequest, project: Project, filters: Filters, run_id: str) -> HttpResponse:
    run = Run.objects.filter(project=project, run_id=run_id).first()
    if run is None:
        raise Http404(f"No run {run_id!r} in this project.")
    sort = parse_sort(request.GET.get("sort"), runs_sel.STEP_SORTS, runs_sel.DEFAULT_STEP_SORT)
    steps = runs_sel.run_steps(run)
    qs = filters.querystring()
    link = call_linker(project.slug, qs)
    # Stacked bottom-up in the order of a context: the head kinds first, the tail last.
    kinds = sorted({k for s in steps for k in s["tokens_by_kind"]},
                   key=lambda k: (KIND_ORDER.index(k) if k in KIND_ORDER else len(KIND_ORDER), k))
    chart = {
        "steps": [s["call"].step for s in steps],
        "urls": [link(s["call"].call_id) for s in steps],
        "kinds": {k: [s["tokens_by_kind"].get(k, 0) for s in steps] for k in kinds},
        "window": [s["call"].window for s in steps],
        "input_cap": [s["call"].input_cap for s in steps],
        "effective_limit": [s["effective_limit"] for s in steps],
        "hit_rate": [s["hit_rate"] for s in steps],
        "cause": [s["cache_cause"] for s in steps],
        "segment": [s["cache_segment"] for s in steps],
        "detail": [s["cache_detail"] for s in steps],
        "compactions": [
            {"step": s["call"].step, "url": link(s["call"].call_id),
             "text": f"{c.strategy}: {c.tokens_before}→{c.tokens_after} tokens"
             + (f", {c.failed_invariants} invariant(s) failed" if c.failed_invariants else "")}
            for s in steps for c in s["compactions"]
        ],
        "edits": [
            {"step": s["call"].step, "url": link(s["call"].call_id),
             "text": f"{e.type}: cleared {e.cleared_count} ({e.cleared_tokens} tokens)"}
            for s in steps for e in s["edits"]
        ],
        "rereads": [
            {"step": s["call"].step, "url": link(s["call"].call_id) + "#rereads",
             "text": f"{s['rereads']['n']} re-read(s), {s['rereads']['tokens']} tokens: "
                     + ", ".join(s["rereads"]["tools"])}
            for s in steps if s["rereads"]
        ],
        # The window by category, one bar per step (ctxkit.breakdown).
        "breakdown": window_sel.per_step((s["call"].step, link(s["call"].call_id), s["window"]) for s in steps),
    }
    # The charts draw every step; the table pages through them (a run may have thousands).
    table = Paginator(sort_list(steps, sort, runs_sel.STEP_SORTS), runs_sel.STEPS_PER_PAGE).get_page(
        request.GET.get("page"))
    runs_sel.label_last_items(list(table.object_list))
    return page(request, "manifests/run.html", project, filters, "run", {"run": run, "steps": steps,
                                                                         "table": table, "sort": sort,
                                                                         "chart": chart,
                                                                         "run_cost": runs_sel.run_cost(steps),
                                                                         "rereads": runs_sel.run_reread_totals(steps)},
                keep={"sort": request.GET.get("sort", "")})


@project_page
def evidence(request: HttpRequest, project: Project, filters: Filters) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    key = request.GET.get("key", "").strip()
    run_id = request.GET.get("run", "").strip()
    if len(query) > evidence_sel.MAX_QUERY or len(key) > 200 or len(run_id) > 200:
        return bad_request(request, "q", "at most 200 characters", project=project)
    context: dict[str, Any] = {"query": query, "key": key, "causes": evidence_sel.cause_breakdown(project, filters),
                               "savings": savings_sel.evidence_causes(project, filters),
                               "saving_days": savings_sel.SAVING_DAYS}
    if query:
        context["results"] = evidence_sel.search(project, filters, query)
    if key:
        runs_missing = evidence_sel.runs_missing(project, filters, key)
        context["runs_missing"] = runs_missing
        if not run_id and runs_missing:
            run_id = runs_missing[0]["call__run__run_id"]
        run = Run.objects.filter(project=project, run_id=run_id).first() if run_id else None
        if run is not None:
            rows = evidence_sel.timeline(project, run, key)
            context["run"] = run
            context["timeline"] = rows
            context["timeline_chart"] = _timeline_chart(project.slug, filters, rows)
    else:
        context["most_missing"] = evidence_sel.most_missing(project, filters)
    chart = {"causes": [{"cause": r["cause"], "label": r["label"], "n": r["n"], "risk": r["is_risk"],
                         "url": calls_url(project.slug, filters, cause=r["cause"])}
                        for r in context["causes"]]}
    context["chart"] = chart
    return page(request, "manifests/evidence.html", project, filters, "evidence", context,
                keep={"q": query, "key": key, "run": run_id})


STAGES = ["candidate", "granted", "truncated", "summarized", "present", "used"]


def _timeline_chart(slug: str, filters: Filters, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A grid: one column per step, one row per stage; 1 yes, 0 no, null unknown."""
    declared = [r for r in rows if r["declared"]]
    z = []
    for stage in STAGES:
        z.append([None if r[stage] is None else int(bool(r[stage])) for r in declared])
    return {
        "steps": [r["call"].step for r in declared],
        "stages": STAGES,
        "z": z,
        "urls": list(map(call_linker(slug, filters.querystring()), (r["call"].call_id for r in declared))),
        "causes": [r["attribution"].cause if r["attribution"] else "" for r in declared],
    }


@project_page
def cache(request: HttpRequest, project: Project, filters: Filters) -> HttpResponse:
    return page(request, "manifests/cache.html", project, filters, "cache", {
        "by_agent_model": cache_sel.by_agent_model(project, filters),
        "regressions": cache_sel.regressions(project, filters),
        "miss_cost": cache_sel.miss_cost(project, filters),
        "savings": savings_sel.cache_causes(project, filters),
        "saving_days": savings_sel.SAVING_DAYS,
        "prefixes": cache_sel.prefixes(project, filters, request.GET.get("page")),
        "chart": _cache_chart(project.slug, filters, cache_sel.chart(project, filters)),
        "lag": series_sel.lag(project),
    })


def _cache_chart(slug: str, filters: Filters, chart: dict[str, Any]) -> dict[str, Any]:
    """Click-through: a line's bucket opens that agent/model's calls of the bucket (cache.js adds
    the bucket's since and until: a week of hourly lines would repeat a URL per point); a point
    its call."""
    chart["bucket_seconds"] = 3600 if chart["bucket"] == Rollup.HOUR else 86400
    for line in chart["lines"].values():
        line["calls_url"] = bucket_base(slug, filters, agent=line["agent"], model=line["model"])
    link = call_linker(slug, filters.querystring())
    for point in chart["points"]:
        point["url"] = link(point["call__call_id"])
    return chart


@project_page
def compactions(request: HttpRequest, project: Project, filters: Filters) -> HttpResponse:
    failed = request.GET.get("failed", "").strip()
    if failed and failed not in INVARIANT_NAMES:
        return bad_request(request, "failed", f"{failed!r} is not one of {', '.join(INVARIANT_NAMES)}",
                           project=project)
    only_failed = request.GET.get("only_failed", "") == "1"
    result = compaction_sel.events(project, filters, failed=failed, only_failed=only_failed,
                                   page=request.GET.get("page"))
    qs = filters.querystring()
    points = []
    for c in result.object_list:
        fig = getattr(c, "figures", None)
        if fig is not None and fig.ratio_r is not None:
            points.append({"r": fig.ratio_r, "d": fig.distortion_d or 0, "failed": bool(c.failed_invariants),
                           "label": f"{c.call.call_id} · {c.strategy}",
                           "url": call_url(project.slug, c.call.call_id, qs)})
    return page(request, "manifests/compactions.html", project, filters, "compactions", {
        "page_obj": result,
        "failed": failed,
        "only_failed": only_failed,
        "invariant_names": INVARIANT_NAMES,
        "failures": compaction_sel.failure_counts(project, filters),
        "totals": compaction_sel.totals(project, filters),
        "chart": {"points": points},
    }, keep={"failed": failed, "only_failed": "1" if only_failed else ""})
