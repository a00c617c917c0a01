"""The reference call view: the plain version of the page (a model instance per item, a template
node per row, reads not bounded by the run's time span), kept to prove that the optimised view
renders the same bytes for the same data (tests/test_views_call_equivalence.py). Template:
tests/reference_templates/call_reference.html."""

# ruff: noqa
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Prefetch, prefetch_related_objects
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

from ctxkit import figures
from ctxkit.figures import in_context
from manifests.figures import ITEM_FIELDS
from manifests.models import (Attribution, CacheEvent, Call, CallFigures, CallKey, Compaction, ContextEdit, Evidence,
                              Invariant, Item, Project)
from manifests.selectors.filters import Filters
from manifests.views.common import page, project_page

FOLD_NOT_SENT_OVER = 12


def call_with_children(project: Project, call_id: str) -> Call:
    # The registry's unique key gives the call's time, so that the call and each of its
    # children are read from one day's partition (PostgreSQL), not probed in every day.
    key = CallKey.objects.filter(project=project, call_key=call_id).values_list("call_id", "started_at").first()
    call = None
    if key is not None:
        call = Call.objects.filter(pk=key[0], started_at=key[1]).select_related("run").first()
    if call is None:
        raise Http404(f"No call {call_id!r} in this project.")
    # The children are read with the call's time too: on PostgreSQL the tables are
    # partitioned by it, so each query reads one day's partition (docs/scaling.md).
    at = call.started_at
    prefetch_related_objects(
        [call],
        Prefetch("items", queryset=Item.objects.filter(started_at=at).order_by("ordinal")),
        Prefetch("evidence", queryset=Evidence.objects.filter(started_at=at)),
        Prefetch(
            "compactions",
            queryset=Compaction.objects.filter(started_at=at)
            .prefetch_related(Prefetch("invariants", queryset=Invariant.objects.filter(started_at=at).order_by("pk")))
            .order_by("pk"),
        ),
        Prefetch("context_edits", queryset=ContextEdit.objects.filter(started_at=at)),
    )
    return call


# How the allocation bar colours an item: by what the context builder did to it. Where
# it sits (in the context, or among the candidates not sent) is shown apart from this.
ACTION_GROUPS = {
    "whole": "kept whole",
    "cut": "compressed or cut",
    "summarized": "summarized",
    "dropped": "dropped",
}


def action_group(item: Item) -> str:
    """``whole`` (kept with all its tokens), ``cut`` (compressed, extracted, truncated,
    replaced by a reference, or kept with fewer tokens than it asked for),
    ``summarized`` (itself, or folded into a summary item), or ``dropped``."""
    inside = figures.in_context(item)
    if not figures.kept_by(item.action) or (item.action == "keep" and not inside):
        return "dropped"
    if item.action == "summarize":
        return "summarized"
    if item.action != "keep" or figures.context_tokens(item) < item.requested_tokens:
        return "cut"
    return "whole"


def context_order(items: list[Item]) -> list[Item]:
    """Items in the order of the final context (ctxkit.figures.context_order), then the
    absent ones in manifest order; each marked with ``in_context`` for the template."""
    for i in items:
        i.in_context = figures.in_context(i)
    return figures.context_order(items) + [i for i in items if not i.in_context]


def allocation_before(call: Call, items: list[Item], *, effective_limit: int | None = None) -> dict[str, Any]:
    """The data of the allocation bar: every item's requested / granted / used in context
    order, grouped by zone, with the output reserve, headroom and window."""
    rows = []
    for item in context_order(items):
        inside = figures.in_context(item)
        tokens = figures.context_tokens(item)
        rows.append(
            {
                "id": item.item_id,
                "kind": item.kind,
                "zone": (item.zone or "middle") if inside else "not sent",
                "position": item.position,
                "action": item.action,
                "group": action_group(item),
                "requested": item.requested_tokens,
                "granted": item.granted_tokens if item.granted_tokens is not None else tokens,
                "used": tokens,
                "trust": item.trust,
                "pinned": item.pinned,
                "in_context": inside,
                "reason": item.reason[:300],
            }
        )
    used = figures.total_context_tokens(items)
    zones: dict[str, int] = {}
    for r in rows:
        if r["in_context"]:
            zones[r["zone"]] = zones.get(r["zone"], 0) + r["used"]
    return {
        "window": call.window,
        "reserve": call.output_reserve,
        "margin": call.safety_margin,
        "input_cap": call.input_cap,
        "effective_limit": effective_limit,
        "used": used,
        "input_tokens": call.input_tokens,
        "headroom": call.input_cap - used,
        "zones": zones,
        "groups": ACTION_GROUPS,
        "items": rows,
    }


def previous_call(call: Call) -> Call | None:
    return (
        Call.objects.filter(run_id=call.run_id, step__lt=call.step)
        .order_by("-step", "-started_at")
        .only("pk", "call_id", "step", "prefix_hash", "prefix_segments", "run_id", "project_id")
        .first()
    )


def next_call(call: Call) -> Call | None:
    return (
        Call.objects.filter(run_id=call.run_id, step__gt=call.step)
        .order_by("step", "started_at")
        .only("pk", "call_id", "step")
        .first()
    )


@dataclass
class Change:
    item_id: str
    kind: str
    what: list[str] = field(default_factory=list)


@dataclass
class Diff:
    previous: Call | None
    entered: list[Change]
    left: list[Change]
    changed: list[Change]
    prefix_changes: list[dict[str, Any]]
    evidence_changes: list[dict[str, Any]]

    @property
    def empty(self) -> bool:
        return not (self.entered or self.left or self.changed or self.prefix_changes or self.evidence_changes)


def _snapshot(items: list[Item]) -> dict[str, dict[str, Any]]:
    return {i.item_id: {f: getattr(i, f) for f in ITEM_FIELDS} | {"in_context": figures.in_context(i)}
            for i in items}


def diff_with_previous(call: Call, items: list[Item]) -> Diff:
    """What entered, left or changed in the context since the previous call of the run."""
    prev = previous_call(call)
    if prev is None:
        return Diff(None, [], [], [], [], [])
    now = _snapshot(items)
    before = _snapshot(
        list(
            Item.objects.filter(call_id=prev.pk, started_at=prev.started_at)
            .order_by("ordinal")
            .only("call_id", *ITEM_FIELDS)
        )
    )
    entered, left, changed = [], [], []
    for item_id, cur in now.items():
        old = before.get(item_id)
        if cur["in_context"] and (old is None or not old["in_context"]):
            entered.append(Change(item_id, cur["kind"], ["new candidate" if old is None else f"was {old['action']}"]))
            continue
        if old is None or not cur["in_context"]:
            continue
        what = []
        if cur["action"] != old["action"]:
            what.append(f"action {old['action']} → {cur['action']}")
        if cur["content_hash"] != old["content_hash"]:
            what.append("content changed")
        if cur["used_tokens"] != old["used_tokens"]:
            what.append(f"used {old['used_tokens'] if old['used_tokens'] is not None else '–'} → "
                        f"{cur['used_tokens'] if cur['used_tokens'] is not None else '–'}")
        if cur["zone"] != old["zone"]:
            what.append(f"zone {old['zone']} → {cur['zone']}")
        if what:
            changed.append(Change(item_id, cur["kind"], what))
    for item_id, old in before.items():
        cur = now.get(item_id)
        if old["in_context"] and (cur is None or not cur["in_context"]):
            left.append(Change(item_id, old["kind"], ["no longer a candidate" if cur is None else cur["action"]]))

    old_segments = {s.get("name"): s for s in prev.prefix_segments or []}
    prefix_changes = []
    for seg in call.prefix_segments or []:
        old = old_segments.pop(seg.get("name"), None)
        if old is None:
            prefix_changes.append({"name": seg.get("name"), "before": None, "after": seg.get("hash")})
        elif old.get("hash") != seg.get("hash"):
            prefix_changes.append({"name": seg.get("name"), "before": old.get("hash"), "after": seg.get("hash")})
    for name, old in old_segments.items():
        prefix_changes.append({"name": name, "before": old.get("hash"), "after": None})

    old_evidence = dict(prev.evidence.filter(started_at=prev.started_at).values_list("key", "present"))
    evidence_changes = [
        {"key": e.key, "before": old_evidence.get(e.key), "after": e.present}
        for e in call.evidence.all()
        if old_evidence.get(e.key) is not None and old_evidence.get(e.key) != e.present
    ]
    return Diff(prev, entered, left, changed, prefix_changes, evidence_changes)


@project_page
def call_detail_before(request: HttpRequest, project: Project, filters: Filters, call_id: str) -> HttpResponse:
    call = call_with_children(project, call_id)
    items = list(call.items.all())
    figures = CallFigures.objects.filter(call=call).first()
    cache_event = CacheEvent.objects.filter(call=call).select_related("previous_call").first()
    attributions = list(Attribution.objects.filter(call=call).select_related("lost_at")
                        .order_by("is_risk", "evidence_key"))
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
    compactions = [{"c": c, "figures": getattr(c, "figures", None), "invariants": list(c.invariants.all())}
                   for c in call.compactions.all()]
    allocation = allocation_before(call, items, effective_limit=figures.effective_limit if figures else None)
    diff = diff_with_previous(call, items)
    ordered = context_order(items)
    # Many items not sent (folded into a summary, cleared, dropped) fold under one line.
    not_sent = sum(1 for i in ordered if not in_context(i))
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
    return page(request, "call_reference.html", project, filters, "runs", {
        "call": call,
        "items": ordered,
        "fold_at": fold_at,
        "not_sent": not_sent,
        "evidence": evidence,
        "risks": [a for a in attributions if a.is_risk],
        "compactions": compactions,
        "figures": figures,
        "cache_event": cache_event,
        "allocation": allocation,
        "diff": diff,
        "next_call": next_call(call),
        "whatif": whatif,
        "qs": qs,
        # Reversed once here, not once per item row in the template.
        "evidence_url": reverse("evidence", args=[project.slug]),
        "qs_amp": f"&{qs}" if qs else "",
    })
