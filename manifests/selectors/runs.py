"""Runs list and run view: per-step context by kind and the window by category, hit rate with
its cause, markers."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import Count, Max, Q, QuerySet, Sum
from django.http import QueryDict

from ctxkit.breakdown import category_of, from_totals
from ctxkit.figures import hit_rate
from ctxkit.manifest import MAX_NAME, MAX_PATH
from manifests import figures
from manifests.models import CacheEvent, Call, CallFigures, Compaction, ContextEdit, Item, Project, ReRead, Run
from manifests.selectors.calls import run_calls
from manifests.selectors.filters import Filters, text_param
from manifests.selectors.sorting import Sort
from manifests.storage import partitions

RUNS_PER_PAGE = 50
STEPS_PER_PAGE = 100
# ?sort= columns of the runs table. "calls" is counted for the sort only when asked for.
RUN_SORTS = {"run": "run_id", "agent": "agent", "model": "model", "first": "first_seen", "last": "last_seen",
             "calls": "n_calls"}
DEFAULT_RUN_SORT = "-last"
# ?sort= columns of a run's steps table (sorted in memory: the run is loaded whole for its charts).
STEP_SORTS = {
    "step": lambda s: s["call"].step,
    "time": lambda s: s["call"].started_at,
    "context": lambda s: s["context_tokens"],
    "input": lambda s: s["call"].input_tokens,
    "hit": lambda s: s["hit_rate"],
    "missing": lambda s: s["call"].evidence_missing,
    "rereads": lambda s: s["rereads"]["tokens"] if s["rereads"] else 0,
}
DEFAULT_STEP_SORT = "step"


@dataclass(frozen=True)
class Place:
    """The runs list's own filters: the folder the agent worked in and its git branch (exact)."""

    cwd: str = ""
    branch: str = ""

    def apply(self, qs: QuerySet[Run]) -> QuerySet[Run]:
        if self.cwd:
            qs = qs.filter(cwd=self.cwd)
        if self.branch:
            qs = qs.filter(git_branch=self.branch)
        return qs


def parse_place(query: QueryDict) -> Place:
    """``?cwd=`` and ``?branch=`` of the runs list; a FilterError naming a bad one."""
    return Place(cwd=text_param(query, "cwd", MAX_PATH), branch=text_param(query, "branch", MAX_NAME))


def runs_page(project: Project, filters: Filters, page: str | int | None, sort: Sort | None = None,
              place: Place | None = None) -> Page[Run]:
    """A page of runs, newest first (or by ``sort``), in ``place`` when given; the per-run
    totals are computed for this page only."""
    sort = sort or Sort("last", True)
    qs = Run.objects.filter(project=project)
    qs = filters.apply(qs, since_field="last_seen", until_field="first_seen")
    if place is not None:
        qs = place.apply(qs)
    if sort.column == "calls":
        qs = qs.annotate(n_calls=Count("calls"))
    result = Paginator(qs.order_by(*sort.order_by(RUN_SORTS)), RUNS_PER_PAGE).get_page(page)
    runs = list(result.object_list)
    stats = {
        row["run_id"]: row
        for row in Call.objects.filter(run__in=runs)
        .values("run_id")
        .annotate(
            calls=Count("pk"),
            input=Sum("input_tokens"),
            cached=Sum("cache_read_tokens"),
            evidence_declared=Sum("evidence_count"),
            missing=Sum("evidence_missing"),
            steps=Max("step"),
        )
    }
    failed = dict(
        Compaction.objects.filter(call__run__in=runs, failed_invariants__gt=0)
        .values("call__run_id")
        .annotate(n=Count("pk"))
        .values_list("call__run_id", "n")
    )
    for run in runs:
        st = stats.get(run.pk, {})
        run.call_count = st.get("calls", 0)
        run.input_total = st.get("input") or 0
        run.hit_rate = hit_rate(st.get("cached") or 0, run.input_total)
        run.evidence_total = st.get("evidence_declared") or 0
        run.evidence_missing = st.get("missing") or 0
        run.failed_compactions = failed.get(run.pk, 0)
    result.object_list = runs
    return result


def run_steps(run: Run) -> list[dict[str, Any]]:
    """One row per call of the run, in step order, with everything the run view draws."""
    # The raw manifest is the largest column and nothing here reads it (a run may have thousands of calls).
    calls = list(run_calls(run.pk, run.first_seen, run.last_seen).defer("raw", "prefix_segments")
                 .order_by("step", "started_at"))
    pks = [c.pk for c in calls]
    # The children by call id and the calls' time span: only the run's days' partitions.
    days = partitions.span(c.started_at for c in calls)
    tokens: defaultdict[int, dict[str, int]] = defaultdict(dict)
    # By kind, and tools by MCP or built-in: the window breakdown's categories (ctxkit.breakdown).
    categories: defaultdict[int, list[tuple[str, int, int]]] = defaultdict(list)
    for row in (
        Item.objects.filter(call_id__in=pks, **days)
        .annotate(mcp=figures.mcp_tool())
        .values("call_id", "kind", "mcp")
        .annotate(tokens=Sum(figures.context_tokens()), n=Count("pk", filter=figures.in_context()))
    ):
        categories[row["call_id"]].append((category_of(row["kind"], row["mcp"]), row["tokens"] or 0, row["n"]))
        if row["tokens"]:
            by_kind = tokens[row["call_id"]]
            by_kind[row["kind"]] = by_kind.get(row["kind"], 0) + row["tokens"]
    per_call = {f.call_id: f for f in CallFigures.objects.filter(call_id__in=pks)}
    events = {e.call_id: e for e in CacheEvent.objects.filter(call_id__in=pks)}
    compactions: defaultdict[int, list[Compaction]] = defaultdict(list)
    for comp in Compaction.objects.filter(call_id__in=pks, **days).order_by("pk"):
        compactions[comp.call_id].append(comp)
    edits = defaultdict(list)
    for e in ContextEdit.objects.filter(call_id__in=pks, **days).order_by("pk"):
        edits[e.call_id].append(e)
    rereads = run_rereads(run)
    rows = []
    for c in calls:
        fig, ev = per_call.get(c.pk), events.get(c.pk)
        rows.append({
            "call": c,
            "tokens_by_kind": tokens.get(c.pk, {}),
            "context_tokens": sum(tokens.get(c.pk, {}).values()),
            "window": from_totals(categories.get(c.pk, []), window=c.window, input_tokens=c.input_tokens),
            "effective_limit": fig.effective_limit if fig else None,
            "cost": fig.cost if fig else None,
            "cost_usd": fig.cost_usd if fig else None,
            "hit_rate": c.cache_hit_ratio,
            "cache_cause": ev.cause if ev else "",
            "cache_segment": ev.changed_segment if ev else "",
            "cache_detail": ev.detail if ev else "",
            "gap_seconds": ev.gap_seconds if ev else None,
            "compactions": compactions.get(c.pk, []),
            "edits": edits.get(c.pk, []),
            "rereads": rereads.get(c.pk),
        })
    return rows


def run_rereads(run: Run) -> dict[int, dict[str, Any]]:
    """Per call of the run (by pk) that re-read something (docs/analysis.md, "Re-reads"): how
    many re-reads, their tokens and the tools re-read, from the re-reads' copy of the run."""
    out: dict[int, dict[str, Any]] = {}
    for call_id, tool, tokens in (ReRead.objects.filter(run_id=run.pk).order_by("step", "pk")
                                  .values_list("call_id", "tool", "tokens")):
        row = out.setdefault(call_id, {"n": 0, "tokens": 0, "tools": []})
        row["n"] += 1
        row["tokens"] += tokens
        if tool and tool not in row["tools"]:
            row["tools"].append(tool)
    return out


def run_reread_totals(steps: list[dict[str, Any]]) -> dict[str, int]:
    """The run's re-reads: how many, their tokens and the steps that re-read."""
    marked = [s["rereads"] for s in steps if s["rereads"]]
    return {"n": sum(r["n"] for r in marked), "tokens": sum(r["tokens"] for r in marked), "steps": len(marked)}


def run_cost(steps: list[dict[str, Any]]) -> dict[str, float | None]:
    """The run's cost: its analysed calls' costs added up, in units and in USD (the USD total of
    the calls that have a USD price; None when none has)."""
    usd = [s["cost_usd"] for s in steps if s["cost_usd"] is not None]
    return {"units": sum(s["cost"] or 0.0 for s in steps), "usd": sum(usd) if usd else None,
            "unpriced": sum(1 for s in steps if s["cost"] is not None and s["cost_usd"] is None)}


def label_last_items(steps: list[dict[str, Any]]) -> None:
    """Give each of ``steps`` (a page of ``run_steps``' rows) ``last_item``: what the agent
    calls its call's last item (Item.label: the prompt's role and turn, the tool result that
    made the agent call again), else that item's id; "" for a call without items."""
    calls = [s["call"] for s in steps]
    if not calls:
        return
    days = partitions.span(c.started_at for c in calls)
    last = (Item.objects.filter(call_id__in=[c.pk for c in calls], **days).values("call_id")
            .annotate(ordinal=Max("ordinal")).values_list("call_id", "ordinal"))
    wanted = Q()
    for call_id, ordinal in last:
        wanted |= Q(call_id=call_id, ordinal=ordinal)
    names = {call_id: label or item_id for call_id, label, item_id in
             (Item.objects.filter(wanted, **days).values_list("call_id", "label", "item_id") if wanted else ())}
    for s in steps:
        s["last_item"] = names.get(s["call"].pk, "")
