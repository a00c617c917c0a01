"""What the manifest's numbers mean: each figure defined once.

This is ctxkit's third job, beside building a context (``ctxkit.context``) and recording
it (``ctxkit.record``). The server computes the same figures in SQL
(``manifests/figures.py``), and a test checks the two forms agree on generated data.
Pages, API, rollups, analysis and replay use these definitions; no other module writes
its own formula for them. docs/analysis.md lists each with its meaning.

The functions take anything with the manifest's field names (duck typing): a decoded
manifest ``Item`` / ``Usage`` or the server's stored rows, which keep the same names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from ctxkit.manifest import ABSENT_ACTIONS, Evidence, Manifest

if TYPE_CHECKING:
    from ctxkit.models import UsdPrices

__all__ = [
    "ABSENT_ACTIONS", "COST_WEIGHTS", "CUT_ACTIONS", "Cause", "MISSING_CAUSES", "RISK_CAUSES", "Step", "Tokens",
    "budget_input_cap", "cache_saving", "cache_write_1h_tokens", "cached_usage", "causes_of_run", "cited_keys",
    "context_order",
    "context_tokens", "cost_units", "cost_usd", "coverage", "effective_limit", "effective_share", "evidence_coverage",
    "evidence_risks", "first_missing", "headroom", "hit_rate", "in_context", "input_cap", "input_read", "kept_by",
    "local_missing_cause", "net_saving", "net_saving_cost", "relative_positions", "reread_tokens", "reserve_share",
    "run_history", "stated_reason", "tool_share", "total_context_tokens", "trace_missing", "uncached_tokens",
    "window_utilization",
]


class ItemLike(Protocol):
    @property
    def action(self) -> str: ...
    @property
    def requested_tokens(self) -> int: ...
    @property
    def granted_tokens(self) -> int | None: ...
    @property
    def used_tokens(self) -> int | None: ...


class UsageLike(Protocol):
    @property
    def input_tokens(self) -> int: ...
    @property
    def cache_read_tokens(self) -> int: ...
    @property
    def cache_write_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...


class BudgetLike(Protocol):
    window: int
    output_reserve: int
    safety_margin: int
    input_cap: int | None


# --------------------------------------------------------------------------- #
# Tokens in context

def kept_by(action: str) -> bool:
    """Does this action leave some of the item in the context? (drop, dedupe, clear do not.)"""
    return action not in ABSENT_ACTIONS


def in_context(item: ItemLike) -> bool:
    """Did anything of the item reach the model? Every action but drop, dedupe and clear
    leaves some of it, whether or not the manifest gave it a position, unless the manifest
    says it took no token: used 0 (else granted 0), as for the records ctxkit folds into a
    compaction summary (the summary item carries their tokens; counting them would not)."""
    if not kept_by(item.action):
        return False
    sent = item.used_tokens if item.used_tokens is not None else item.granted_tokens
    return sent is None or sent > 0


def context_tokens(item: ItemLike) -> int:
    """Tokens the item takes in the context the model read: what it used, else what it
    was granted, else what it asked for; 0 when nothing of it reached the model."""
    if not in_context(item):
        return 0
    if item.used_tokens is not None:
        return item.used_tokens
    if item.granted_tokens is not None:
        return item.granted_tokens
    return item.requested_tokens


def reread_tokens(result: ItemLike) -> int:
    """Tokens of a re-read (docs/analysis.md, "Re-reads"): the re-read tool result's tokens
    in the context of the call that first holds it, as :func:`context_tokens` counts them."""
    return context_tokens(result)


def total_context_tokens(items: Iterable[ItemLike]) -> int:
    """Tokens in context of a call: the sum over its items."""
    return sum(context_tokens(i) for i in items)


def context_order(items: Sequence[Any]) -> list[Any]:
    """The items that reached the model, in the order the model read them: by ``position``
    when given, then (unpositioned) in manifest order."""
    indexed = [(n, i) for n, i in enumerate(items) if in_context(i)]
    indexed.sort(key=lambda p: (p[1].position is None, p[1].position or 0, p[0]))
    return [i for _, i in indexed]


def relative_positions(items: Sequence[Any], *, key: Callable[[Any], str] = lambda i: i.id) -> dict[str, float]:
    """Where each item sits in the final context, 0 (first token) .. 1 (last token): the
    token offset of the item's middle over the context's length. By token offset rather
    than by rank, because one 5k-token log and ten 50-token notes are not eleven equal
    steps for the model."""
    order = context_order(items)
    sizes = [context_tokens(i) for i in order]
    total = sum(sizes)
    if total <= 0:
        n = len(order)
        return {key(item): (k + 0.5) / n for k, item in enumerate(order)}
    out: dict[str, float] = {}
    offset = 0
    for item, size in zip(order, sizes, strict=True):
        out[key(item)] = round((offset + size / 2) / total, 4)
        offset += size
    return out


# --------------------------------------------------------------------------- #
# The window: input cap, input read, headroom and shares of the window

def input_cap(window: int, output_reserve: int = 0, safety_margin: int = 0) -> int:
    """The most input a call may send: the window less the output reserve
    and the safety margin, never below 0."""
    return max(0, window - output_reserve - safety_margin)


def budget_input_cap(budget: BudgetLike) -> int:
    """The input cap of a manifest's budget: the one it states, else :func:`input_cap` of
    its window, reserve and margin."""
    if budget.input_cap is not None:
        return budget.input_cap
    return input_cap(budget.window, budget.output_reserve, budget.safety_margin)


def input_read(input_tokens: int, context_tokens: int) -> int:
    """The input the model read: the provider's ``input_tokens`` when it reported any (it
    counts everything sent, the question and framing included), else the manifest's own
    tokens in context (:func:`total_context_tokens`)."""
    return input_tokens if input_tokens > 0 else context_tokens


def headroom(cap: int, read: int) -> int:
    """How many more input tokens could have gone in: the input cap less the input read
    (:func:`input_read`). Negative: the call was over its cap by that much."""
    return cap - read


def window_utilization(read: int, window: int) -> float:
    """How full the window was: the input read over the window."""
    return read / max(1, window)


def reserve_share(output_reserve: int, window: int) -> float:
    """The share of the window kept free for the answer."""
    return output_reserve / max(1, window)


def tool_share(tool_tokens: int, context_tokens: int) -> float:
    """The share of the tokens in context taken by tool schemas; 0 with an empty context."""
    return tool_tokens / context_tokens if context_tokens > 0 else 0.0


def effective_limit(window: int, ratio: float) -> int:
    """The part of the window the model uses well: ``ratio`` of it (the model's
    ``effective_limit_ratio``), at least 1 token."""
    return max(1, int(window * ratio))


def effective_share(read: int, limit: int) -> float:
    """The input read against the effective limit; above 1: past where quality holds up."""
    return read / max(1, limit)


# --------------------------------------------------------------------------- #
# Prompt cache and cost

def hit_rate(cache_read_tokens: int, input_tokens: int) -> float | None:
    """Share of the input read from the provider's prompt cache. ``None`` when there was
    no input: a call (or bucket) that read nothing has no hit rate, and counting it as 0
    would draw a false drop on every trend. Sums first, then divide (token-weighted)."""
    if input_tokens <= 0:
        return None
    return cache_read_tokens / input_tokens


def uncached_tokens(usage: UsageLike) -> int:
    """Input tokens billed at the full rate: input minus cache reads and cache writes
    (usage is in OpenTelemetry's normal form, where input includes both)."""
    return max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)


# The price of a token relative to one uncached input token. A 1-hour cache write costs what a
# cache write costs unless the weights name ``cache_write_1h`` (USD prices do: ctxkit.models).
COST_WEIGHTS: dict[str, float] = {"input": 1.0, "output": 4.0, "cache_read": 0.1, "cache_write": 1.25}


def cache_write_1h_tokens(usage: UsageLike) -> int:
    """The part of the cache writes written with a 1-hour TTL (never more than the writes;
    0 for usage that does not report the split)."""
    reported: int = getattr(usage, "cache_write_1h_tokens", 0) or 0
    return min(reported, usage.cache_write_tokens)


def cost_units(usage: UsageLike, weights: Mapping[str, float] = COST_WEIGHTS) -> float:
    """The call's cost in relative units: each kind of token at its weight
    (an uncached input token is 1 with the default weights). The server passes the
    model's price per token (its price table holds prices per 1k tokens)."""
    write_1h = cache_write_1h_tokens(usage)
    return (
        uncached_tokens(usage) * weights["input"]
        + usage.cache_read_tokens * weights["cache_read"]
        + (usage.cache_write_tokens - write_1h) * weights["cache_write"]
        + write_1h * weights.get("cache_write_1h", weights["cache_write"])
        + usage.output_tokens * weights["output"]
    )


def cost_usd(usage: UsageLike, prices: UsdPrices | None) -> float | None:
    """The call's cost in US dollars: :func:`cost_units` at the model's USD price per token of
    each kind (``ctxkit.models``: genai-prices' table, or a project's price row), 1-hour cache
    writes at their own price. None when the model has no USD price."""
    return None if prices is None else cost_units(usage, prices.weights)


@dataclass(frozen=True)
class Tokens:
    """A call's usage in the normal form, as :func:`cached_usage` rewrites it."""

    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    cache_write_1h_tokens: int = 0


def cached_usage(usage: UsageLike, prefix_tokens: int) -> Tokens:
    """The same call had its stable prefix been read from the cache: the prefix tokens it
    did not read (``prefix_tokens`` less its cache reads) move to cache reads, taken first
    from what it wrote to the cache (its 5-minute writes before its 1-hour ones), then from its
    uncached input. Input and output stay."""
    missed = max(0, prefix_tokens - usage.cache_read_tokens)
    from_write = min(usage.cache_write_tokens, missed)
    from_uncached = min(uncached_tokens(usage), missed - from_write)
    writes = usage.cache_write_tokens - from_write
    return Tokens(input_tokens=usage.input_tokens,
                  cache_read_tokens=usage.cache_read_tokens + from_write + from_uncached,
                  cache_write_tokens=writes,
                  output_tokens=usage.output_tokens,
                  cache_write_1h_tokens=min(cache_write_1h_tokens(usage), writes))


def cache_saving(usage: UsageLike, prefix_tokens: int, weights: Mapping[str, float] = COST_WEIGHTS) -> float:
    """What a cache miss cost beyond a hit: :func:`cost_units` of the call as it was paid
    less :func:`cost_units` of :func:`cached_usage` (its prefix read from the cache). Never
    below 0; 0 for a call that read its whole prefix from the cache. In USD with the model's
    USD prices as the weights (``UsdPrices.weights``)."""
    return max(0.0, cost_units(usage, weights) - cost_units(cached_usage(usage, prefix_tokens), weights))


# A compaction's net saving: what it took out less what its re-reads brought back.

def net_saving(tokens_before: int, tokens_after: int, reread_tokens: int) -> int:
    """What a compaction saved net (docs/analysis.md, "Re-reads"): the tokens it took out of
    the context (``tokens_before`` less ``tokens_after``) less the re-read tokens of the
    re-reads it caused (:func:`reread_tokens` of each). Negative: the re-reads cost more than
    the compaction saved."""
    return tokens_before - tokens_after - reread_tokens


def net_saving_cost(net_tokens: int, weights: Mapping[str, float] = COST_WEIGHTS) -> float:
    """A :func:`net_saving` in cost units: each token at the weight of an uncached input token,
    as :func:`cost_units` prices it (the tokens a compaction takes out and those a re-read
    brings back are input the following call sends); the sign is kept. In USD with the
    model's USD prices as the weights (``UsdPrices.weights``)."""
    return net_tokens * weights["input"]


# --------------------------------------------------------------------------- #
# Evidence: coverage, missing (did not reach the model) and at risk (reached it)

def coverage(present: int, total: int) -> float | None:
    """Share of the required evidence present in the context; None with none required."""
    return present / total if total > 0 else None


def evidence_coverage(evidence: Sequence[Any]) -> float | None:
    """:func:`coverage` of one call's evidence list."""
    return coverage(sum(1 for e in evidence if e.present), len(evidence))


# Causes of evidence that did NOT reach the model (four causes, plus "left the
# candidates": present earlier in the run, then no longer offered, without a decision).
NEVER_CANDIDATE = "never_candidate"
LEFT_CANDIDATES = "left_candidates"
BUDGET = "budget"
TRUNCATED = "truncated"
COMPACTION = "compaction"
MISSING_CAUSES = (NEVER_CANDIDATE, LEFT_CANDIDATES, BUDGET, TRUNCATED, COMPACTION)
# Risks: the evidence reached the model, but may not help.
NOT_USED = "not_used"
MIDDLE_ZONE = "middle_zone"
TRUNCATED_PRESENT = "truncated_present"
RISK_CAUSES = (NOT_USED, MIDDLE_ZONE, TRUNCATED_PRESENT)

# The decision on the expected item -> the cause of a missing piece of evidence.
CAUSE_OF_ACTION = {
    "drop": BUDGET,
    "hard_cut": BUDGET,
    "dedupe": BUDGET,
    "truncate": TRUNCATED,
    "ref": TRUNCATED,
    "summarize": COMPACTION,
    "compress": COMPACTION,
    "extract": COMPACTION,
    "clear": COMPACTION,
    # Kept whole and still without the evidence: the item never held it.
    "keep": NEVER_CANDIDATE,
}
CUT_ACTIONS = frozenset({"truncate", "hard_cut"})
# Middle zone when the item has no zone: the middle half of the context by token offset.
MIDDLE_LOW, MIDDLE_HIGH = 0.25, 0.75


@dataclass(frozen=True)
class Cause:
    """Why one piece of evidence did not help: the cause, the item it concerns, what the
    analysis found in words, the decision on that item as its manifest recorded it (its
    ``action`` and the builder's ``decision`` text, at the call where the evidence was lost),
    and (for a cause traced through the run) the index, in the run's history, of the step
    where it was lost (None: at this very call)."""

    cause: str
    item_id: str | None
    reason: str
    lost_at: int | None = None
    action: str = ""
    decision: str = ""

    @property
    def is_risk(self) -> bool:
        return self.cause in RISK_CAUSES


def _decided(cause: str, item: Any, reason: str) -> Cause:
    """A cause concerning ``item`` (a manifest item), with the decision recorded on it."""
    return Cause(cause, item.id, reason, action=item.action, decision=item.reason or "")


def _item(manifest: Manifest, item_id: str | None) -> Any:
    return next((i for i in manifest.items if i.id == item_id), None) if item_id else None


def _norm(text: str | None) -> str:
    return " ".join((text or "").split()).casefold()


def _with_decision(manifest: Manifest, cause: str, item_id: str | None, reason: str) -> Cause:
    """A cause concerning ``item_id``, with the decision its manifest recorded on it when
    the item is among the call's candidates."""
    item = _item(manifest, item_id)
    return _decided(cause, item, reason) if item is not None else Cause(cause, item_id, reason)


def _lost_in_compaction(manifest: Manifest, ev: Evidence) -> Cause | None:
    """The first compaction whose failed invariant lists this evidence (by key, label or
    literal) among what it lost."""
    names = {_norm(x) for x in (ev.key, ev.label, ev.literal) if x}
    for comp in manifest.compactions:
        for inv in comp.invariants:
            if not inv.ok and any(_norm(lost) in names for lost in inv.lost):
                detail = inv.detail or f"invariant {inv.name} failed"
                return _with_decision(manifest, COMPACTION, comp.summary_item or ev.expected_item,
                                      f"compaction {comp.id} ({comp.strategy}): {detail}")
    return None


def _cleared_by_edit(manifest: Manifest, item_id: str | None) -> Cause | None:
    if not item_id:
        return None
    for edit in manifest.context_edits:
        if item_id in edit.item_ids:
            return _with_decision(manifest, COMPACTION, item_id, f"cleared by the context edit {edit.type}")
    return None


def local_missing_cause(manifest: Manifest, ev: Evidence) -> Cause:
    """The cause of missing evidence read from this call's manifest alone, with the
    decision recorded on the item it concerns."""
    lost = _lost_in_compaction(manifest, ev)
    if lost is not None:
        return lost
    cleared = _cleared_by_edit(manifest, ev.expected_item)
    if cleared is not None:
        return cleared
    item = _item(manifest, ev.expected_item)
    if item is None:
        why = (f"no candidate item {ev.expected_item!r} in this call" if ev.expected_item
               else "no candidate item was expected to carry it and none did")
        return Cause(NEVER_CANDIDATE, ev.expected_item, why)
    cause = CAUSE_OF_ACTION.get(item.action, NEVER_CANDIDATE)
    if cause == NEVER_CANDIDATE:
        return _decided(cause, item, f"item {item.id!r} was kept whole but did not contain the evidence")
    return _decided(cause, item, "")


@dataclass(frozen=True)
class Step:
    """One call of a run as the trace sees one evidence key: ``present`` is None when the
    call did not declare the key; ``local`` computes its own cause when it is missing."""

    present: bool | None
    local: Callable[[], Cause]
    label: str = ""


def trace_missing(history: Sequence[Step], at: int) -> Cause:
    """The cause of evidence missing at ``history[at]``, decided by the run's history.

    The missing streak is the calls that declared the key and lacked it since the last
    call that had it. The first step of the streak where it was lost (dropped, cut,
    truncated away, lost in a compaction or summary, cleared by a context edit) is the
    cause for every later step, with ``lost_at`` pointing at it. When no step of the
    streak recorded a loss but an earlier call had the evidence, it left the candidates
    at the streak's first step. "Never a candidate" only when no earlier call had it.
    """
    start = at
    for j in range(at - 1, -1, -1):
        if history[j].present is None:
            continue
        if history[j].present:
            break
        start = j
    had_before = any(s.present for s in history[:start])
    for j in range(start, at + 1):
        if history[j].present is not False:
            continue
        cause = history[j].local()
        if cause.cause != NEVER_CANDIDATE:
            return cause if j == at else replace(cause, lost_at=j)
    if had_before:
        last = max(j for j in range(start) if history[j].present)
        own = history[at].local()
        return Cause(LEFT_CANDIDATES, own.item_id,
                     f"present at {history[last].label or f'call {last}'}; no longer a candidate from "
                     f"{history[start].label or f'call {start}'} on, without a recorded decision",
                     lost_at=None if start == at else start, action=own.action, decision=own.decision)
    return history[at].local()


def stated_reason(cause: Cause, lost_at: str | None = None) -> str:
    """The reason an attribution states: what the analysis found, then the decision as its
    manifest recorded it. For a loss traced to an earlier step (``lost_at``, that step's
    label: "step 2") it starts "lost at step 2: ", followed by the same words that step's own
    attribution states (or, when none were recorded, the action on the item), so every step
    of the streak names the one decision. "No longer a candidate" says where in its own words."""
    text = "; ".join(x for x in (cause.reason, cause.decision) if x)
    if lost_at is None or cause.cause == LEFT_CANDIDATES:
        return text
    if not text and cause.action:
        text = f"{cause.action} of {cause.item_id!r}" if cause.item_id else cause.action
    return f"lost at {lost_at}: {text}" if text else f"lost at {lost_at}"


def evidence_risks(manifest: Manifest, ev: Evidence, positions: Mapping[str, float],
                   cited: set[str] | None) -> list[Cause]:
    """Risks of evidence that reached the model: not used by the answer, cut (truncated
    but the evidence survived), placed in the middle of the context."""
    where = ev.found_in or ev.expected_item
    item = _item(manifest, where)
    out: list[Cause] = []
    used = ev.used
    if used is None and cited is not None:
        used = ev.key in cited
    if used is False:
        why = "the answer's claims do not cite it" if ev.used is None else "marked not used by the answer"
        out.append(_decided(NOT_USED, item, why) if item is not None else Cause(NOT_USED, where, why))
    if item is None:
        return out
    if item.action in CUT_ACTIONS:
        out.append(_decided(TRUNCATED_PRESENT, item,
                            f"item {item.id!r} was cut ({item.action}); the evidence survived this time"))
    middle = (item.zone == "middle" if item.zone is not None
              else item.id in positions and MIDDLE_LOW <= positions[item.id] <= MIDDLE_HIGH)
    if middle:
        where_text = "zone middle" if item.zone else f"at {positions[item.id]:.0%} of the context"
        out.append(_decided(MIDDLE_ZONE, item, f"item {item.id!r} placed in the middle ({where_text})"))
    return out


def cited_keys(manifest: Manifest) -> set[str] | None:
    """Evidence keys the answer's claims rest on; None when no claims were sent."""
    outcome = manifest.outcome
    if outcome is None or outcome.claims is None:
        return None
    return {k for claim in outcome.claims for k in claim.evidence_keys}


def _local_cause(manifest: Manifest, key: str) -> Cause:
    return local_missing_cause(manifest, first_missing(manifest, key))


def run_history(manifests: Sequence[Manifest], key: str) -> list[Step]:
    """The trace's view of one evidence key over a run's manifests (in step order)."""
    steps = []
    for m in manifests:
        entries = [e for e in m.evidence if e.key == key]
        steps.append(Step(
            present=any(e.present for e in entries) if entries else None,
            local=functools.partial(_local_cause, m, key),
            label=f"step {m.step}",
        ))
    return steps


def first_missing(manifest: Manifest, key: str) -> Evidence:
    """The entry of ``key`` a trace reads a call's own cause from: its first missing one."""
    entries = [e for e in manifest.evidence if e.key == key]
    return next((e for e in entries if not e.present), entries[0])


def causes_of_run(manifests: Sequence[Manifest]) -> list[list[tuple[str, list[Cause]]]]:
    """Reference attribution of a whole run: per call (in the given step order), per
    evidence entry, its key and its causes (one missing cause, or its risks)."""
    histories: dict[str, list[Step]] = {}
    out = []
    for n, m in enumerate(manifests):
        positions = relative_positions(m.items)
        cited = cited_keys(m)
        row = []
        for ev in m.evidence:
            if ev.present:
                row.append((ev.key, evidence_risks(m, ev, positions, cited)))
                continue
            history = histories.setdefault(ev.key, run_history(manifests, ev.key))
            row.append((ev.key, [trace_missing(history, n)]))
        out.append(row)
    return out
