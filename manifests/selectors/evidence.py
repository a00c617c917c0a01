"""Evidence triage: search, one evidence's timeline across a run, and the causes project-wide."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Q

from ctxkit.manifest import ABSENT_ACTIONS
from manifests.models import Attribution, Evidence, Item, Project, Run
from manifests.selectors.filters import Filters

CUT_ACTIONS = {"truncate", "hard_cut"}
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


def most_missing(project: Project, filters: Filters, limit: int = 20) -> list[dict[str, Any]]:
    return list(
        Evidence.objects.filter(project=project, present=False)
        .filter(_calls(project, filters))
        .values("key")
        .annotate(missing=Count("pk"), last=Max("call__started_at"))
        .order_by("-missing", "key")[:limit]
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
    calls = list(run.calls.order_by("step", "started_at").only("pk", "call_id", "step", "started_at"))
    pks = [c.pk for c in calls]
    evidence = {e.call_id: e for e in Evidence.objects.filter(call_id__in=pks, key=key)}
    wanted = {e.found_in or e.expected_item for e in evidence.values()} - {None}
    items: dict[tuple[int, str], Item] = {
        (i.call_id, i.item_id): i
        for i in Item.objects.filter(call_id__in=pks, item_id__in=wanted).only(
            "call_id", "item_id", "action", "position", "requested_tokens", "granted_tokens", "used_tokens")
    }
    causes = {a.call_id: a for a in Attribution.objects.filter(call_id__in=pks, evidence_key=key, is_risk=False)}
    risks = {a.call_id: a for a in Attribution.objects.filter(call_id__in=pks, evidence_key=key, is_risk=True)}
    rows = []
    for c in calls:
        e = evidence.get(c.pk)
        if e is None:
            rows.append({"call": c, "declared": False})
            continue
        item = items.get((c.pk, e.found_in or e.expected_item or ""))
        inside = item is not None and item.position is not None and item.action not in ABSENT_ACTIONS
        attribution = causes.get(c.pk) or risks.get(c.pk)
        rows.append({
            "call": c,
            "declared": True,
            "item": item,
            "candidate": item is not None,
            "granted": inside and (item.granted_tokens is None or item.granted_tokens > 0),
            "truncated": item is not None and item.action in CUT_ACTIONS,
            "summarized": item is not None and item.action in SUMMARY_ACTIONS,
            "present": e.present,
            "used": e.used,
            "attribution": attribution,
        })
    return rows


def cause_breakdown(project: Project, filters: Filters) -> list[dict[str, Any]]:
    """Attributions by cause in the range, each with its latest example call."""
    labels = dict(Attribution.CAUSES)
    qs = Attribution.objects.filter(project=project)
    if filters.since is not None:
        qs = qs.filter(started_at__gte=filters.since)
    if filters.until is not None:
        qs = qs.filter(started_at__lt=filters.until)
    if filters.agent:
        qs = qs.filter(call__agent=filters.agent)
    if filters.model:
        qs = qs.filter(call__model=filters.model)
    rows = list(qs.values("cause", "is_risk").annotate(n=Count("pk"), last=Max("pk")).order_by("-n"))
    examples = {a.pk: a for a in Attribution.objects.filter(pk__in=[r["last"] for r in rows]).select_related("call")}
    for r in rows:
        r["label"] = labels.get(r["cause"], r["cause"])
        r["example"] = examples.get(r["last"])
    return rows


