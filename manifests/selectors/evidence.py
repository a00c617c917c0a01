"""Evidence triage: search, one evidence's timeline across a run, and the causes project-wide."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import Count, Max, Q, QuerySet

from ctxkit import figures
from manifests.figures import MISSING_CAUSES, RISK_CAUSES
from manifests.models import Attribution, Evidence, Item, Project, Run
from manifests.selectors import series
from manifests.selectors.calls import run_calls
from manifests.selectors.filters import Filters
from manifests.storage import partitions

CUT_ACTIONS = figures.CUT_ACTIONS
SUMMARY_ACTIONS = {"summarize", "compress", "extract"}
MAX_QUERY = 200


def _calls(project: Project, filters: Filters, prefix: str = "call__") -> Q:
    q = Q()
    if filters.since is not None:
        q &= Q(**{f"{prefix}started_at__gte": filters.since})
    if filters.until is not None:
        q &= Q(**{f"{prefix}started_at__lt": filters.until})
    if filters.agent:
        q &= Q(**{f"{prefix}agent": filters.agent})
    if filters.model:
        q &= Q(**{f"{prefix}model": filters.model})
    return q


def search(project: Project, filters: Filters, query: str, limit: int = 50) -> dict[str, Any]:
    """Evidence keys whose key or label matches, and items whose ref or content hash does."""
    query = query.strip()[:MAX_QUERY]
    if not query:
        return {"keys": [], "items": []}
    keys = list(
        Evidence.objects.filter(project=project)
        .filter(Q(key=query) | Q(label__icontains=query) | Q(key__istartswith=query))
        .filter(_calls(project, filters))
        .values("key")
        .annotate(calls=Count("pk"), missing=Count("pk", filter=Q(present=False)), last=Max("call__started_at"))
        .order_by("-last")[:limit]
    )
    items = list(
        Item.objects.filter(project=project)
        .filter(Q(content_hash=query) | Q(source_ref=query) | Q(source_ref__istartswith=query))
        .filter(_calls(project, filters))
        .select_related("call")
        .order_by("-call__started_at")[:limit]
    )
    return {"keys": keys, "items": items}


def _attributions(project: Project, filters: Filters) -> QuerySet[Attribution]:
    qs = Attribution.objects.filter(project=project)
    qs = filters.apply(qs, agent_field="call__agent", model_field="call__model")
    return qs


def most_missing(project: Project, filters: Filters, limit: int = 20) -> list[dict[str, Any]]:
    """Evidence keys most often missing in the range. Read from the attributions (one per
    missing evidence), index-only from their (project, cause, time) index, which includes the key."""
    return list(
        _attributions(project, filters)
        .filter(cause__in=MISSING_CAUSES)
        .values("evidence_key")
        .annotate(missing=Count("*"), last=Max("started_at"))
        .order_by("-missing", "evidence_key")[:limit]
    )


def runs_missing(project: Project, filters: Filters, key: str, limit: int = 20) -> list[dict[str, Any]]:
    """Runs where ``key`` was missing at least once, latest first."""
    return list(
        Evidence.objects.filter(project=project, key=key)
        .filter(_calls(project, filters))
        .values("call__run__run_id")
        .annotate(missing=Count("pk", filter=Q(present=False)), calls=Count("pk"), last=Max("call__started_at"))
        .filter(missing__gt=0)
        .order_by("-last")[:limit]
    )


def timeline(project: Project, run: Run, key: str) -> list[dict[str, Any]]:
    """The evidence across the calls of a run: candidate? granted? truncated? summarized?
    present? used? and the attributed cause, one row per call."""
    calls = list(run_calls(run.pk, run.first_seen, run.last_seen).order_by("step", "started_at")
                 .only("pk", "call_id", "step", "started_at"))
    pks = [c.pk for c in calls]
    days = partitions.span(c.started_at for c in calls)  # only the run's days' partitions
    evidence = {e.call_id: e for e in Evidence.objects.filter(call_id__in=pks, key=key, **days)}
    wanted = {e.found_in or e.expected_item for e in evidence.values()} - {None}
    items: dict[tuple[int, str], Item] = {
        (i.call_id, i.item_id): i
        for i in Item.objects.filter(call_id__in=pks, item_id__in=wanted, **days).only(
            "call_id", "item_id", "action", "position", "requested_tokens", "granted_tokens", "used_tokens")
    }
    causes = {a.call_id: a for a in Attribution.objects.filter(call_id__in=pks, evidence_key=key, is_risk=False)}
    by_pk = {c.pk: c for c in calls}
    for a in causes.values():  # lost at an earlier call of this run: one already read, no join
        if a.lost_at_id is not None:
            a.lost_at = by_pk.get(a.lost_at_id)
    risks: dict[int, list[Attribution]] = defaultdict(list)
    for a in Attribution.objects.filter(call_id__in=pks, evidence_key=key, is_risk=True).order_by("pk"):
        risks[a.call_id].append(a)
    rows = []
    for c in calls:
        e = evidence.get(c.pk)
        if e is None:
            rows.append({"call": c, "declared": False})
            continue
        item = items.get((c.pk, e.found_in or e.expected_item or ""))
        inside = item is not None and figures.in_context(item)
        rows.append({
            "call": c,
            "declared": True,
            "item": item,
            "candidate": item is not None,
            "granted": item is not None and inside and (item.granted_tokens is None or item.granted_tokens > 0),
            "truncated": item is not None and item.action in CUT_ACTIONS,
            "summarized": item is not None and item.action in SUMMARY_ACTIONS,
            "present": e.present,
            "used": e.used,
            "attribution": causes.get(c.pk),
            "risks": risks.get(c.pk, []),
        })
    return rows


def cause_breakdown(project: Project, filters: Filters) -> list[dict[str, Any]]:
    """Attributions by cause in the range (summed from the roll-ups), each with its latest
    example call (one indexed lookup per cause)."""
    labels = dict(Attribution.CAUSES)
    counts: dict[str, int] = defaultdict(int)
    for row in series.rollups(project, filters).values_list("attributions", flat=True):
        for cause, n in (row or {}).items():
            counts[cause] += n
    rows = []
    # Missing evidence first (it did not reach the model), then the risks.
    for cause, n in sorted(counts.items(), key=lambda kv: (kv[0] in RISK_CAUSES, -kv[1], kv[0])):
        if not n:
            continue
        example = (_attributions(project, filters).filter(cause=cause).select_related("call")
                   .order_by("-started_at").first())
        rows.append({"cause": cause, "label": labels.get(cause, cause), "n": n,
                     "is_risk": cause in RISK_CAUSES, "example": example})
    return rows
