"""Per-call figures (docs/analysis.md, "Figures of a call")."""

from __future__ import annotations

from ctxkit.record.manifest import Item as ManifestItem
from ctxkit.record.manifest import Manifest
from manifests.analysis.data import CallData, clean, context_tokens, in_context
from manifests.analysis.prices import Price
from manifests.models import CallFigures


def context_order(manifest: Manifest) -> list[ManifestItem]:
    """The items that reached the model, in the order the model read them: by ``position``
    when given, else in manifest order."""
    indexed = [(n, i) for n, i in enumerate(manifest.items) if in_context(i)]
    indexed.sort(key=lambda p: (p[1].position is None, p[1].position or 0, p[0]))
    return [i for _, i in indexed]


def relative_positions(manifest: Manifest) -> dict[str, float]:
    """Where each item sits in the final context, 0 (first token) .. 1 (last token): the
    token offset of the item's middle over the context's length. By token offset rather
    than by rank, because one 5k-token log and ten 50-token notes are not eleven equal
    steps for the model."""
    order = context_order(manifest)
    sizes = [context_tokens(i) for i in order]
    total = sum(sizes)
    out: dict[str, float] = {}
    if total <= 0:
        n = len(order)
        return {item.id: (k + 0.5) / n for k, item in enumerate(order)}
    offset = 0
    for item, size in zip(order, sizes):
        out[item.id] = round((offset + size / 2) / total, 4)
        offset += size
    return out


def compute(data: CallData, price: Price, positions: dict[str, float]) -> CallFigures:
    call, m = data.call, data.manifest
    usage = m.usage
    items = m.items
    ctx_tokens = sum(context_tokens(i) for i in items)
    # What occupied the window: the provider's count when sent, else the manifest's own.
    occupied = usage.input_tokens or ctx_tokens
    window = call.window or 1
    uncached = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
    effective_limit = max(1, int(call.window * price.effective_limit_ratio))

    # Duplicates among the candidates: deduplicated ones, and any whose content hash an
    # earlier candidate already had. Also what of that still reached the model.
    requested_total = sum(i.requested_tokens for i in items)
    seen_hashes: set[str] = set()
    seen_in_context: set[str] = set()
    duplicate_tokens = 0
    duplicate_context = 0
    for item in items:
        repeated = item.content_hash is not None and item.content_hash in seen_hashes
        if item.action == "dedupe" or repeated:
            duplicate_tokens += item.requested_tokens
        if item.content_hash is not None:
            seen_hashes.add(item.content_hash)
            if in_context(item):
                if item.content_hash in seen_in_context:
                    duplicate_context += context_tokens(item)
                seen_in_context.add(item.content_hash)

    tool_tokens = sum(context_tokens(i) for i in items if i.kind == "tools")
    untrusted = sum(context_tokens(i) for i in items if i.trust == "untrusted")
    evidence = m.evidence
    present = sum(1 for e in evidence if e.present)
    evidence_positions: dict[str, float] = {}
    for e in evidence:
        where = e.found_in or e.expected_item
        if e.present and where in positions:
            evidence_positions[clean(e.key)] = positions[where]

    return CallFigures(
        call=call,
        project_id=call.project_id,
        started_at=call.started_at,
        context_tokens=ctx_tokens,
        uncached_input_tokens=uncached,
        cache_hit_ratio=usage.cache_read_tokens / usage.input_tokens if usage.input_tokens else 0.0,
        window_utilization=occupied / window,
        effective_limit=effective_limit,
        effective_share=occupied / effective_limit,
        reserve_share=call.output_reserve / window,
        headroom_tokens=call.input_cap - occupied,
        duplicate_ratio=duplicate_tokens / requested_total if requested_total else 0.0,
        duplicate_context_tokens=duplicate_context,
        evidence_coverage=present / len(evidence) if evidence else None,
        tool_tokens=tool_tokens,
        tool_share=tool_tokens / ctx_tokens if ctx_tokens else 0.0,
        untrusted_tokens=untrusted,
        cost=price.cost(
            uncached=uncached,
            cache_read=usage.cache_read_tokens,
            cache_write=usage.cache_write_tokens,
            output=usage.output_tokens,
        ),
        evidence_positions=evidence_positions,
    )
