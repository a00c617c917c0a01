"""Manifest items from the parts of a build, and clipping to the schema's limits.

Used by :mod:`ctxkit.record.assemble`; the public helpers (:func:`record_items`,
:func:`projection_items`, :func:`block_items`, :func:`short_id`) are for callers who assemble
``extra_items`` themselves. Every helper returns items the server accepts: ids of at most
``MAX_ID`` characters, reasons clipped, token counts in range, ``used <= granted``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

import msgspec

from ctxkit import figures
from ctxkit.context.tokens import Estimator, estimate_tokens
from ctxkit.manifest import (
    ITEM_KINDS,
    MAX_ID,
    MAX_NAME,
    MAX_REASON,
    MAX_TOKENS,
    Action,
    Item,
    ItemKind,
    Trust,
    is_item_kind,
)

if TYPE_CHECKING:
    from ctxkit.context.allocator import Plan
    from ctxkit.context.compaction import Record
    from ctxkit.context.grouping import Projection
    from ctxkit.context.layout import Block, Layout

# Kinds whose content is data, never instructions, whatever their segment says.
UNTRUSTED_KINDS: frozenset[str] = frozenset({"tool_result", "retrieval"})
MAX_SOURCE_REF = 1000


def short_id(value: str) -> str:
    """``value`` if it fits an id (1..200 chars), else a deterministic shortening:
    the head of it, ``~`` and 16 hex of its sha256, so distinct long ids stay distinct
    and the same long id maps to the same short one in every call."""
    if not value:
        raise ValueError("ids must not be empty")
    if len(value) <= MAX_ID:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{value[: MAX_ID - 17]}~{digest}"


def opt_id(value: str | None) -> str | None:
    return short_id(value) if value else None


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clamp_tokens(value: int) -> int:
    """``value`` as an int within 0..MAX_TOKENS."""
    if type(value) is int and 0 <= value <= MAX_TOKENS:
        return value
    return min(max(int(value), 0), MAX_TOKENS)


# --------------------------------------------------------------------------- #
# Items from the parts of a build


def trust_for(kind: str, trust: str, untrusted_kinds: Collection[str]) -> Trust:
    return "untrusted" if trust == "untrusted" or kind in untrusted_kinds else "trusted"


def sanitize_item(item: Item) -> Item:
    """A copy of a caller-made item clipped to the schema's limits (ids shortened, texts and
    counts clipped, ``used <= granted``); the caller's object is left as it was."""
    out = msgspec.structs.replace(
        item,
        id=short_id(item.id),
        requested_tokens=clamp_tokens(item.requested_tokens),
        priority=min(max(item.priority, 0), 1000),
        reason=clip(item.reason, MAX_REASON),
        source_ref=clip(item.source_ref, MAX_SOURCE_REF) if item.source_ref else None,
        source_version=clip(item.source_version, MAX_NAME) if item.source_version else None,
        content_hash=item.content_hash[:128] if item.content_hash else None,
        group=opt_id(item.group),
        position=max(item.position, 0) if item.position is not None else None,
    )
    if out.granted_tokens is not None:
        out.granted_tokens = clamp_tokens(out.granted_tokens)
    if out.used_tokens is not None:
        out.used_tokens = clamp_tokens(out.used_tokens)
    return out


def plan_items(plan: Plan, untrusted_kinds: Collection[str], warnings: list[str]) -> list[tuple[Item, str]]:
    """One item per allocation (in the plan's input order) and the text that reached the model."""
    out: list[tuple[Item, str]] = []
    for a in plan.allocations:
        used, granted, requested = clamp_tokens(a.used), clamp_tokens(a.granted), clamp_tokens(a.requested)
        if used > granted:  # never expected from the allocator; the server would refuse it
            warnings.append(f"item {a.name!r}: used {used} tokens > granted {granted}; recorded as granted")
            used = granted
        reason = a.reason
        if a.merged_sources:
            reason += f"; provenance merged from {', '.join(a.merged_sources)}"
        item = Item(
            id=short_id(a.name),
            kind=a.kind,
            action=a.action,
            requested_tokens=requested,
            granted_tokens=granted,
            used_tokens=used,
            priority=min(max(a.priority, 0), 1000),
            pinned=a.pinned,
            trust=trust_for(a.kind, a.trust, untrusted_kinds),
            zone=a.zone,
            reason=clip(reason, MAX_REASON),
            source_ref=clip(a.source_ref, MAX_SOURCE_REF) if a.source_ref else None,
            content_hash=a.content_hash or None,
            allocation=a.replay_settings(),
        )
        out.append((item, a.text if figures.kept_by(a.action) else ""))
    return out


_CLEARED_TOKENS = re.compile(r", (\d+) tokens\]$")


def layout_items(
    layout: Layout, known: Mapping[str, Item], *, untrusted_kinds: Collection[str] = UNTRUSTED_KINDS
) -> list[tuple[Item, str]]:
    """Items for placed blocks that are not in ``known`` (id -> item): a constraint restated at
    the end of the tail (it costs tokens again; it takes its source's trust and hash) or content
    the allocator does not manage, such as the question. Each with the text that was sent."""
    out: list[tuple[Item, str]] = []
    for p in layout.placed:
        if short_id(p.id) in known:
            continue
        source = known.get(short_id(p.restated_from)) if p.restated_from else None
        kind: ItemKind = p.block.kind if is_item_kind(p.block.kind) else "other"
        if source is not None:
            reason = f"restates {p.restated_from!r} verbatim (same text, same hash) at the end of the tail"
            trust, pinned, content_hash = source.trust, source.pinned, source.content_hash
        else:
            reason = "placed by the layout; not a candidate of the allocator"
            trust, pinned, content_hash = trust_for(kind, "trusted", untrusted_kinds), False, p.content_hash
        tokens = clamp_tokens(p.tokens)
        item = Item(
            id=short_id(p.id), kind=kind, action="keep", requested_tokens=tokens,
            used_tokens=tokens, pinned=pinned, trust=trust, reason=reason, content_hash=content_hash,
        )
        out.append((item, p.block.text))
    return out


def record_items(
    records: Iterable[Record],
    *,
    skip: Collection[str] = (),
    untrusted_kinds: Collection[str] = UNTRUSTED_KINDS,
    estimate: Estimator = estimate_tokens,
) -> list[Item]:
    """Items for history records that no longer reach the model whole.

    A record folded into a compaction summary becomes ``summarize`` (its content reaches the
    model only through the summary); a cleared tool result becomes ``clear`` (only its
    placeholder remains). Live records are skipped: their text is part of a segment, which is
    an item already, and listing them again would count their tokens twice. So is any record
    whose id is in ``skip`` (the plan's segment names).
    """
    from ctxkit.context.operators import content_key  # loaded only when records are listed

    items: list[Item] = []
    for r in records:
        if r.id in skip or (r.compacted_by is None and not r.cleared):
            continue
        kind: ItemKind = r.kind if is_item_kind(r.kind) else "history"
        if r.cleared:
            # The placeholder says how many tokens the original had (compaction.placeholder).
            m = _CLEARED_TOKENS.search(r.text)
            requested = int(m.group(1)) if m else estimate(r.text)
            what = "thinking block" if r.kind == "thinking" else "tool result"
            reason = f"old {what} cleared to a placeholder with ref={r.ref or r.id}"
            if r.compacted_by:
                reason += f", then folded into {r.compacted_by}"
            action: Action = "clear"
            content_hash = None
        else:
            requested = estimate(r.text)
            reason = f"folded into the compaction summary {r.compacted_by}; not sent verbatim"
            action = "summarize"
            content_hash = content_key(r.text) if r.text else None
        items.append(
            Item(
                id=short_id(r.id),
                kind=kind,
                action=action,
                requested_tokens=clamp_tokens(requested),
                granted_tokens=0,
                used_tokens=0,
                pinned=r.pinned,
                trust=trust_for(kind, "trusted", untrusted_kinds),
                reason=clip(reason, MAX_REASON),
                source_ref=clip(r.ref, MAX_SOURCE_REF) if r.ref else None,
                content_hash=content_hash,
                group=f"turn-{r.turn}" if r.turn is not None else None,
            )
        )
    return items


def projection_items(
    projection: Projection, *, prefix: str = "history/", include_kept: bool = False, kind: ItemKind = "history"
) -> list[Item]:
    """Items for the interaction groups of a budgeted projection (``grouping.project``).

    By default only the dropped groups: the kept ones usually go on into a history segment,
    which is an item already. With ``include_kept`` every group is listed (use it when the
    projected messages are sent as they are). A group holding tool results is untrusted.
    """
    if kind not in ITEM_KINDS:
        raise ValueError(f"kind {kind!r} is not one of {ITEM_KINDS}")
    kept = set(projection.kept_group_ids)
    items: list[Item] = []
    for g in projection.groups:
        is_kept = g.id in kept
        if is_kept and not include_kept:
            continue
        tokens = clamp_tokens(g.tokens)
        if is_kept:
            reason = f"whole group kept, newest first within the history budget {projection.budget}"
            if projection.overflow_tokens and g.id == projection.kept_group_ids[-1] and len(kept) == 1:
                reason = f"newest group kept whole although it exceeds the history budget by " \
                         f"{projection.overflow_tokens} tokens (never half a group)"
        else:
            reason = f"older than the kept groups: history budget {projection.budget}, " \
                     f"{projection.used_tokens} used by newer groups; dropped whole"
        items.append(
            Item(
                id=short_id(prefix + g.id),
                kind=kind,
                action="keep" if is_kept else "drop",
                requested_tokens=tokens,
                granted_tokens=tokens if is_kept else 0,
                used_tokens=tokens if is_kept else 0,
                trust="untrusted" if g.result_ids else "trusted",
                reason=clip(reason, MAX_REASON),
                group=short_id(g.id),
            )
        )
    return items


def block_items(blocks: Iterable[Block], *, untrusted_kinds: Collection[str] = UNTRUSTED_KINDS,
                estimate: Estimator = estimate_tokens) -> list[Item]:
    """Items for blocks the allocator does not manage (kept whole, appended after the segments)."""
    items = []
    for b in blocks:
        kind: ItemKind = b.kind if is_item_kind(b.kind) else "other"
        tokens = clamp_tokens(b.tokens(estimate))
        items.append(Item(
            id=short_id(b.id), kind=kind, action="keep", requested_tokens=tokens, used_tokens=tokens,
            trust=trust_for(kind, "trusted", untrusted_kinds),
            reason="not a candidate of the allocator; appended after the segments", text=b.text or None,
        ))
    return items

