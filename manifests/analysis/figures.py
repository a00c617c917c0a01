"""Per-call figures (docs/analysis.md, "Figures of a call")."""

from __future__ import annotations

from collections.abc import Iterable

from ctxkit import figures as fig
from ctxkit.figures import context_tokens, in_context
from ctxkit.manifest import Manifest
from manifests.analysis.data import CallData, clean
from manifests.analysis.prices import Price, usd_prices
from manifests.models import Call, CallFigures


def relative_positions(manifest: Manifest) -> dict[str, float]:
    """ctxkit.figures.relative_positions of the manifest's items."""
    return fig.relative_positions(manifest.items)


def cost(data: CallData, price: Price) -> tuple[float, float | None]:
    """The call's cost: ctxkit.figures.cost_units of its usage at its model's price row, and
    ctxkit.figures.cost_usd at its model's USD prices (None: the model has none)."""
    usage, call = data.manifest.usage, data.call
    usd = usd_prices(price, call.model, call.provider, usage.input_tokens, call.started_at)
    return fig.cost_units(usage, price.weights), fig.cost_usd(usage, usd)


def stored_costs(calls: Iterable[Call]) -> dict[int, tuple[float, float | None]]:
    """The costs (relative, USD) stored in the figures of each of ``calls`` that has them, by call pk."""
    pks = [c.pk for c in calls]
    if not pks:
        return {}
    rows = CallFigures.objects.filter(call_id__in=pks).values_list("call_id", "cost", "cost_usd")
    return {pk: (units, usd) for pk, units, usd in rows}


def compute(data: CallData, price: Price, positions: dict[str, float]) -> CallFigures:
    call, m = data.call, data.manifest
    usage = m.usage
    items = m.items
    ctx_tokens = fig.total_context_tokens(items)
    read = fig.input_read(usage.input_tokens, ctx_tokens)
    uncached = fig.uncached_tokens(usage)
    effective_limit = fig.effective_limit(call.window, price.effective_limit_ratio)
    units, usd = cost(data, price)

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
        cache_hit_ratio=fig.hit_rate(usage.cache_read_tokens, usage.input_tokens),
        window_utilization=fig.window_utilization(read, call.window),
        effective_limit=effective_limit,
        effective_share=fig.effective_share(read, effective_limit),
        reserve_share=fig.reserve_share(call.output_reserve, call.window),
        headroom_tokens=fig.headroom(call.input_cap, read),
        duplicate_ratio=duplicate_tokens / requested_total if requested_total else 0.0,
        duplicate_context_tokens=duplicate_context,
        evidence_coverage=fig.evidence_coverage(evidence),
        tool_tokens=tool_tokens,
        tool_share=fig.tool_share(tool_tokens, ctx_tokens),
        untrusted_tokens=untrusted,
        cost=units,
        cost_usd=usd,
        evidence_positions=evidence_positions,
    )
