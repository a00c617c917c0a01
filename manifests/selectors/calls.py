"""Reads for the call view: the call with its children, the allocation bar's data,
and what changed since the previous call of the run."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Prefetch, QuerySet, prefetch_related_objects
from django.http import Http404

from ctxkit import figures
from manifests.figures import ITEM_FIELDS
from manifests.models import (
    Attribution,
    CacheEvent,
    Call,
    CallFigures,
    CallKey,
    Compaction,
    ContextEdit,
    Evidence,
    Invariant,
    Item,
    Project,
    ReRead,
)


def call_with_children(project: Project, call_id: str) -> Call:
    """The call with its items, evidence, compactions (their invariants and figures) and
    context edits, and its raw manifest (the what-if replay reads its settings there)."""
    return _call(project, call_id, items=True)


def call_for_page(project: Project, call_id: str) -> Call:
    """The call view's call: as ``call_with_children`` but without its items (the page
    reads them as tuples: ``item_rows``), and with its figures and cache event joined
    (``call_figures``, ``cache_event``) rather than read by two more queries. The raw
    manifest (kilobytes, TOAST) is not read: nothing on the page shows it."""
    return _call(project, call_id, items=False, related=("figures", "cache_event"), defer=("raw",))


def _call(project: Project, call_id: str, *, items: bool, related: tuple[str, ...] = (),
          defer: tuple[str, ...] = ()) -> Call:
    # The registry's unique key gives the call's time, so that the call and each of its
    # children are read from one day's partition (PostgreSQL), not probed in every day.
    key = CallKey.objects.filter(project=project, call_key=call_id).values_list("call_id", "started_at").first()
    call = None
    if key is not None:
        call = (Call.objects.filter(pk=key[0], started_at=key[1]).select_related("run", *related).defer(*defer)
                .first())
    if call is None:
        raise Http404(f"No call {call_id!r} in this project.")
    # The children are read with the call's time too: on PostgreSQL the tables are
    # partitioned by it, so each query reads one day's partition (docs/scaling.md).
    at = call.started_at
    lookups = [
        Prefetch("evidence", queryset=Evidence.objects.filter(started_at=at)),
        Prefetch(
            "compactions",
            # Their figures joined here, not read one query per compaction by the view.
            queryset=Compaction.objects.filter(started_at=at).select_related("figures")
            .prefetch_related(Prefetch("invariants", queryset=Invariant.objects.filter(started_at=at).order_by("pk")))
            .order_by("pk"),
        ),
        Prefetch("context_edits", queryset=ContextEdit.objects.filter(started_at=at)),
    ]
    if items:
        lookups.insert(0, Prefetch("items", queryset=Item.objects.filter(started_at=at).order_by("ordinal")))
    prefetch_related_objects([call], *lookups)
    return call


def call_figures(call: Call) -> CallFigures | None:
    """The call's figures, joined by ``call_for_page``; None before its analysis."""
    return getattr(call, "figures", None)  # a missing one-to-one raises an AttributeError


def cache_event(call: Call) -> CacheEvent | None:
    """The call's cache event, joined by ``call_for_page``; None before its analysis."""
    return getattr(call, "cache_event", None)


class ItemRow(NamedTuple):
    """An item of the call view: its stored fields (``ITEM_FIELDS``, in that order) as a tuple (no
    model instance: a call has up to a few hundred items, and building instances would be a good
    part of the page's time), and whether it reached the model (ctxkit.figures.in_context), computed once."""

    item_id: str
    kind: str
    action: str
    trust: str
    priority: int
    pinned: bool
    zone: str | None
    position: int | None
    requested_tokens: int
    granted_tokens: int | None
    used_tokens: int | None
    reason: str
    source_ref: str | None
    source_version: str | None
    content_hash: str | None
    group: str | None
    text: str | None
    label: str | None
    in_context: bool


assert ItemRow._fields == (*ITEM_FIELDS, "in_context"), "ItemRow follows manifests.figures.ITEM_FIELDS"


def item_rows(call: Call) -> list[ItemRow]:
    """The call's items in manifest order, as ``ItemRow`` tuples, from its day's partition."""
    rows = []
    for values in (Item.objects.filter(call_id=call.pk, started_at=call.started_at).order_by("ordinal")
                   .values_list(*ITEM_FIELDS)):
        row = ItemRow._make((*values, False))
        rows.append(row._replace(in_context=True) if figures.in_context(row) else row)
    return rows


# How the allocation bar colours an item: by what the context builder did to it. Where
# it sits (in the context, or among the candidates not sent) is shown apart from this.
ACTION_GROUPS = {
    "whole": "kept whole",
    "cut": "compressed or cut",
    "summarized": "summarized",
    "dropped": "dropped",
}


def action_group(item: Item | ItemRow) -> str:
    """``whole`` (kept with all its tokens), ``cut`` (compressed, extracted, truncated,
    replaced by a reference, or kept with fewer tokens than it asked for),
    ``summarized`` (itself, or folded into a summary item), or ``dropped``."""
    return _group(item, figures.in_context(item), figures.context_tokens(item))


def _group(item: Item | ItemRow, inside: bool, tokens: int) -> str:
    if not figures.kept_by(item.action) or (item.action == "keep" and not inside):
        return "dropped"
    if item.action == "summarize":
        return "summarized"
    if item.action != "keep" or tokens < item.requested_tokens:
        return "cut"
    return "whole"


def context_order(items: list[Any]) -> list[Any]:
    """Items in the order of the final context (ctxkit.figures.context_order), then the
    absent ones in manifest order. ``ItemRow`` carries ``in_context``; model instances are
    marked with it here, for the template."""
    for i in items:
        if not isinstance(i, tuple):
            i.in_context = figures.in_context(i)
    return figures.context_order(items) + [i for i in items if not i.in_context]


def allocation(call: Call, ordered: list[ItemRow], *, effective_limit: int | None = None) -> dict[str, Any]:
    """The data of the allocation bar: every item's requested / granted / used in context
    order (``ordered``: ``context_order``'s list), grouped by zone, with the output
    reserve, the input read, headroom (ctxkit.figures.headroom) and window."""
    rows: list[dict[str, Any]] = []
    for item in ordered:
        inside = item.in_context
        tokens = figures.context_tokens(item)
        rows.append(
            {
                "id": item.item_id,
                "label": item.label or "",
                "kind": item.kind,
                "zone": (item.zone or "middle") if inside else "not sent",
                "position": item.position,
                "action": item.action,
                "group": _group(item, inside, tokens),
                "requested": item.requested_tokens,
                "granted": item.granted_tokens if item.granted_tokens is not None else tokens,
                "used": tokens,
                "trust": item.trust,
                "pinned": item.pinned,
                "in_context": inside,
                "reason": item.reason[:300],
            }
        )
    used = figures.total_context_tokens(ordered)
    read = figures.input_read(call.input_tokens, used)
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
        # The input the model read (ctxkit.figures.input_read): the provider's count, else the
        # items'. What it read beyond the items (the question, framing) is drawn as its own segment.
        "input_read": read,
        "unitemized": read - used,
        "headroom": figures.headroom(call.input_cap, read),
        "zones": zones,
        "groups": ACTION_GROUPS,
        "items": rows,
    }


def run_calls(run_id: int, first: datetime, last: datetime) -> QuerySet[Call]:
    """The calls of a run, bounded by the run's time span (``Run.first_seen`` and
    ``last_seen``: the least and greatest of its calls' times, widened by ingest under the
    row lock), so that PostgreSQL plans and reads only the partitions of the run's days,
    not every day's (docs/scaling.md). On SQLite the bounds are one more index condition."""
    return Call.objects.filter(run_id=run_id, started_at__gte=first, started_at__lte=last)


def _run_calls_of(call: Call) -> QuerySet[Call]:
    run = call.run  # select_related by the call view and the comparison
    return run_calls(call.run_id, run.first_seen, run.last_seen)


def previous_call(call: Call) -> Call | None:
    return (
        _run_calls_of(call).filter(step__lt=call.step)
        .order_by("-step", "-started_at")
        .only("pk", "call_id", "step", "started_at", "prefix_hash", "prefix_segments", "run_id", "project_id")
        .first()
    )


def next_call(call: Call) -> Call | None:
    return (
        _run_calls_of(call).filter(step__gt=call.step)
        .order_by("step", "started_at")
        .only("pk", "call_id", "step")
        .first()
    )


def attributions(call: Call) -> list[Attribution]:
    """The call's attributions, losses before risks, each with the earlier call of the run
    where its evidence was lost (``lost_at``), read within the run's time span rather than
    joined by id alone, which PostgreSQL would plan over every day's partition."""
    rows = list(Attribution.objects.filter(call=call).order_by("is_risk", "evidence_key"))
    lost = {a.lost_at_id for a in rows if a.lost_at_id is not None}
    if lost:
        at = {c.pk: c for c in _run_calls_of(call).filter(pk__in=lost).only("pk", "call_id", "step", "started_at")}
        for a in rows:
            if a.lost_at_id is not None:
                a.lost_at = at.get(a.lost_at_id)
    return rows


@dataclass
class Change:
    item_id: str
    kind: str
    what: list[str] = field(default_factory=list)
    label: str = ""  # what the agent calls the item (Item.label), when recorded


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


class _DiffItem(NamedTuple):
    """What the diff compares of an item: read as tuples, the previous call's items need no
    model instance and none of their other fields (reasons, texts)."""

    item_id: str
    kind: str
    action: str
    content_hash: str | None
    used_tokens: int | None
    granted_tokens: int | None
    zone: str | None
    label: str | None


_DIFF_FIELDS = _DiffItem._fields


def _by_id(items: list[Any]) -> dict[str, tuple[Any, bool]]:
    # The last item of an id wins, in the place of its first (a dict built in manifest order).
    return {i.item_id: (i, figures.in_context(i)) for i in items}


def _tokens(value: int | None) -> str:
    return str(value) if value is not None else "–"


def diff_with_previous(call: Call, items: list[Any]) -> Diff:
    """What entered, left or changed in the context since the previous call of the run.
    ``items``: the call's items in manifest order (``ItemRow`` tuples or model instances)."""
    prev = previous_call(call)
    if prev is None:
        return Diff(None, [], [], [], [], [])
    now = _by_id(items)
    before = _by_id([
        _DiffItem(*row) for row in Item.objects.filter(call_id=prev.pk, started_at=prev.started_at)
        .order_by("ordinal").values_list(*_DIFF_FIELDS)
    ])
    entered, left, changed = [], [], []
    for item_id, (cur, cur_in) in now.items():
        old, old_in = before.get(item_id, (None, False))
        if cur_in and (old is None or not old_in):
            entered.append(Change(item_id, cur.kind, ["new candidate" if old is None else f"was {old.action}"],
                                  cur.label or ""))
            continue
        if old is None or not cur_in:
            continue
        what = []
        if cur.action != old.action:
            what.append(f"action {old.action} → {cur.action}")
        if cur.content_hash != old.content_hash:
            what.append("content changed")
        if cur.used_tokens != old.used_tokens:
            what.append(f"used {_tokens(old.used_tokens)} → {_tokens(cur.used_tokens)}")
        if cur.zone != old.zone:
            what.append(f"zone {old.zone} → {cur.zone}")
        if what:
            changed.append(Change(item_id, cur.kind, what, cur.label or ""))
    for item_id, (old, old_in) in before.items():
        cur, cur_in = now.get(item_id, (None, False))
        if old_in and (cur is None or not cur_in):
            left.append(Change(item_id, old.kind, ["no longer a candidate" if cur is None else cur.action],
                               old.label or ""))

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


def rereads(call: Call) -> list[ReRead]:
    """The re-reads on this call, with the earlier result's call and the call that lost it."""
    return list(ReRead.objects.filter(call=call).select_related("earlier_call", "lost_call").order_by("pk"))


def reread_costs(call: Call) -> dict[str, tuple[int, int]]:
    """Per compaction event id or context edit type of this call: (re-read tokens, calls
    re-reading) of the re-reads its loss caused (docs/analysis.md, "Re-reads")."""
    tokens: dict[str, int] = {}
    readers: dict[str, set[int]] = {}
    for ref, spent, reader in ReRead.objects.filter(lost_call=call).values_list("cause_ref", "tokens", "call_id"):
        tokens[ref] = tokens.get(ref, 0) + spent
        readers.setdefault(ref, set()).add(reader)
    return {ref: (tokens[ref], len(readers[ref])) for ref in tokens}


@dataclass(frozen=True)
class NetSaving:
    """A compaction's net saving (ctxkit.figures.net_saving) in tokens, cost units and USD."""

    tokens: int
    units: float
    usd: float | None


def net_saving(call: Call, compaction: Compaction, reread_tokens: int) -> NetSaving:
    """The net saving of one of ``call``'s compactions that caused ``reread_tokens``, priced at
    the call's model (its price row, and its USD prices: None without one)."""
    from manifests.analysis.prices import PriceBook

    book = PriceBook.load()
    tokens = figures.net_saving(compaction.tokens_before, compaction.tokens_after, reread_tokens)
    usd = book.usd(call.model, call.provider, call.input_tokens, call.started_at)
    return NetSaving(tokens, figures.net_saving_cost(tokens, book.for_model(call.model).weights),
                     None if usd is None else figures.net_saving_cost(tokens, usd.weights))


def compaction_cards(call: Call) -> list[dict[str, Any]]:
    """The call's compactions as the call view's cards: each with its figures, invariants, the
    re-reads it caused ((tokens, calls), None without any) and its net saving."""
    costs = reread_costs(call)
    out = []
    for c in call.compactions.all():
        reread = costs.get(c.event_id)
        out.append({"c": c, "figures": getattr(c, "figures", None), "invariants": list(c.invariants.all()),
                    "reread": reread, "net": net_saving(call, c, reread[0] if reread else 0)})
    return out

