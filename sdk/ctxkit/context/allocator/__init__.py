"""Budget allocator: reserve output, pin hard segments, floors, share by priority.

API notes
---------
``allocate(segments, *, budget, reserve=0, safety_margin=0, estimate=estimate_tokens, naive=False,
aging=None, aging_step=1, dedupe_across=True) -> Plan``

1. ``cap = budget - reserve - safety_margin`` (>= 0; ``ctxkit.figures.input_cap``). The reserve
   is output space: input never consumes it, even when the pinned segments do not fit.
2. Exact duplicates across segments (same normalized content) and, among segments with
   ``near_dupes=True``, near-duplicates (5-gram Jaccard >= 0.75) become action ``dedupe``; the
   survivor (higher effective priority, then name) records their sources in ``merged_sources``.
   Inside each non-pinned segment exact repeated lines are removed (``dedupe=True``) and, with
   ``near_dupes=True``, near-duplicate lines merged with a visible note. ``requested`` is
   counted after this lossless step; ``raw_tokens`` before it.
3. Pinned segments (``policy="pin"``) are kept whole and charged first. If they alone exceed
   the cap, ``over_budget=True`` and every other segment gets 0: capacity is never faked.
4. Floors: in order ``(-effective_priority, name)`` each segment gets
   ``min(min_tokens, requested, left)`` (for ``window`` at least its pinned lines, for ``schema``
   at least the minimal form of its pinned tools; those ``schema`` segments go first).
5. The rest is shared by weight (= effective priority): ``int(pool * w / W)`` capped at need,
   from a fixed pool (not the shrinking ``left``). What capped segments leave is shared again among the others (water
   filling); the last tokens from rounding go one each in ``(-effective_priority, name)`` order.
   Segments with priority 0 only get what the weighted ones leave.
6. ``drop`` segments are all or nothing: a share below the whole need would be wasted, so the
   shares of those that got too little are pooled and they are granted whole from it in
   ``(-effective_priority, name)`` order while they fit; the rest of the pool water-fills the
   segments that can shrink.
7. Each segment is cut to its grant by its policy (operators module). ``used <= granted``
   always; a segment whose grant buys nothing is ``drop``. A ``schema`` segment's pinned tools
   (``pinned_lines`` holds their names) are never dropped: when their minimal form does not fit
   what is left, it is kept and charged anyway and the plan is ``over_budget``.

Aging: ``aging`` maps segment name -> number of consecutive previous calls in which
it was starved (dropped for lack of budget). Its effective priority is
``priority + aging_step * count``; it sorts and weighs by that. ``Plan.starvation`` gives the
counts to pass to the next call (starved now: count + 1; got in: removed), so a low-priority
segment rises until it gets in once and then falls back to its own priority.

``dedupe_across=False`` skips step 2's duplicates across segments (a replay of candidates that
were already deduped: what-if on a stored manifest).

``naive=True`` is the naive baseline: concatenation order, no reserve, no dedupe, no
pinning, hard cut at the limit without a marker.

``Plan`` (``to_dict()`` is JSON-serialisable): mode, budget, reserve, safety_margin, cap,
allocations (input order), over_budget, requested, granted, used, headroom (``ctxkit.figures.headroom``: cap - used;
negative only when over budget), dedupe_saved, starvation, warnings; ``outputs()`` maps
segment name -> text, ``text()`` joins them, ``get(name)``, ``to_budget()`` -> manifest Budget.
``Allocation``: name, kind, policy, priority, effective_priority, pinned, trust, zone,
source_ref, position, raw_tokens, requested, granted, used, action (manifest Action), reason,
text, content_hash, operations (OpRecord tuple), merged_sources (tuple), duplicate_of;
``to_item(include_text=False)`` -> manifest Item.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal

from ctxkit import figures
from ctxkit.context.allocator import cache as alloc_cache
from ctxkit.context.allocator.apply import (  # noqa: F401  (POLICY_ACTION, apply_policy: re-exported)
    POLICY_ACTION,
    apply_policies,
    apply_policy,
)
from ctxkit.context.allocator.share import share, whole_or_nothing
from ctxkit.context.allocator.types import Allocation, Segment
from ctxkit.context.operators import (
    memo,
    merge_near_duplicate_lines,
    merge_near_duplicates,
    score_line,
)
from ctxkit.context.operators.dedupe import dedupe_record
from ctxkit.context.operators.schema import pinned_tools_tokens
from ctxkit.context.tokens import (
    Estimator,
    clip,
    estimate_tokens,
    estimator_name,
    memo_estimator,
    tokens_from_cjk,
)
from ctxkit.manifest import POLICIES, Budget, Policy

__all__ = ["POLICIES", "Allocation", "Plan", "Policy", "Segment", "allocate"]



@dataclass(slots=True)
class Plan:
    """The allocation of one call's input budget."""

    mode: Literal["priority", "naive"]
    budget: int
    reserve: int
    safety_margin: int
    cap: int
    allocations: list[Allocation]
    over_budget: bool
    requested: int
    granted: int
    used: int
    headroom: int
    dedupe_saved: int
    starvation: dict[str, int]
    warnings: list[str]
    estimator: str = "ctxkit"  # estimator_name() of what counted the tokens (recorded for replay)
    held_back: int = 0  # tokens a caller kept out of the allocation (ContextBuilder's final-text check)

    def get(self, name: str) -> Allocation:
        for a in self.allocations:
            if a.name == name:
                return a
        raise KeyError(name)

    def outputs(self) -> dict[str, str]:
        """Segment name -> text that reaches the model (``""`` when absent)."""
        return {a.name: a.text for a in self.allocations}

    def text(self, sep: str = "\n\n") -> str:
        return sep.join(a.text for a in self.allocations if a.text)

    def to_budget(self) -> Budget:
        return Budget(window=self.budget, output_reserve=self.reserve, safety_margin=self.safety_margin,
                      input_cap=self.cap)

    def to_dict(self, include_text: bool = True) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "budget": self.budget,
            "reserve": self.reserve,
            "safety_margin": self.safety_margin,
            "cap": self.cap,
            "over_budget": self.over_budget,
            "requested": self.requested,
            "granted": self.granted,
            "used": self.used,
            "headroom": self.headroom,
            "dedupe_saved": self.dedupe_saved,
            "starvation": dict(self.starvation),
            "warnings": list(self.warnings),
            "allocations": [a.to_dict(include_text) for a in self.allocations],
        }


# --------------------------------------------------------------------------- #


def allocate(
    segments: Sequence[Segment],
    *,
    budget: int,
    reserve: int = 0,
    safety_margin: int = 0,
    estimate: Estimator = estimate_tokens,
    naive: bool = False,
    aging: Mapping[str, int] | None = None,
    aging_step: int = 1,
    dedupe_across: bool = True,
) -> Plan:
    """Allocate ``budget`` among ``segments``; see the module docstring for the rules."""
    if budget < 0 or reserve < 0 or safety_margin < 0:
        raise ValueError("budget, reserve and safety_margin must be >= 0")
    names = [s.name for s in segments]
    if len(set(names)) != len(names):
        raise ValueError("segment names must be unique (they become manifest item ids)")
    aging = aging or {}
    counted_with = estimator_name(estimate)
    # Per-text facts (content key, CJK count, line dedupe) come from a cache kept across calls;
    # the estimator gets a memo for this call, which asks for the same counts many times over
    # (raw size, dedupe, policy, cut, check of the cut). The facts' CJK counts give the
    # default estimator's counts of the segments without a scan.
    default = estimate is estimate_tokens
    known: dict[str, int] = {}
    estimate = memo_estimator(estimate, known=known)
    repeats: list[tuple[str, list[list[int]]] | None] = []  # line dedupe to apply, by position
    allocs: list[Allocation] = []
    # Line dedupe: not for pinned segments, nor in naive mode, nor for one line (nothing repeats).
    dedupes = [not naive and s.dedupe and s.policy != "pin" and "\n" in s.text for s in segments]
    with_text = [i for i, s in enumerate(segments) if s.text]
    known_facts = alloc_cache.facts_many([segments[i].text for i in with_text], [dedupes[i] for i in with_text])
    all_facts: list[alloc_cache.TextFacts | None] = [None] * len(segments)
    for i, facts in zip(with_text, known_facts, strict=True):
        all_facts[i] = facts
    for i, s in enumerate(segments):
        text = s.text
        pinned = s.policy == "pin" and not naive
        f = all_facts[i]
        if f is not None:
            line_dedupe = dedupes[i]
            repeats.append(f.repeats if line_dedupe and f.repeats and f.repeats[1] else None)
            if default:  # the facts' CJK count gives the default estimate without a scan
                raw = tokens_from_cjk(len(text), f.cjk)
                if not text.isascii():
                    known[text] = raw
                    if f.deduped_cjk and f.repeats is not None:
                        deduped = f.repeats[0]
                        known[deduped] = tokens_from_cjk(len(deduped), f.deduped_cjk)
            else:
                raw = estimate(text)
            key = f.key
        else:
            repeats.append(None)
            raw, key = 0, ""
        effective = s.priority + aging_step * max(0, aging.get(s.name, 0)) if aging else s.priority
        allocs.append(Allocation.of(s, i, effective, pinned, raw, key))
    if naive:
        plan = _naive(segments, allocs, budget, estimate)
    else:
        plan = _priority(segments, allocs, budget, reserve, safety_margin, estimate, repeats, dedupe_across)
    plan.starvation = {
        a.name: aging.get(a.name, 0) + 1 for a in plan.allocations if a.action == "drop" and a.requested > 0
    }
    plan.estimator = counted_with
    return plan


def _naive(segments: Sequence[Segment], allocs: list[Allocation], budget: int, estimate: Estimator) -> Plan:
    left = budget
    for seg, a in zip(segments, allocs, strict=True):
        a.requested = a.raw_tokens
        a.granted = min(a.requested, left)
        left -= a.granted
        if a.granted == a.requested:
            a.text, a.action, a.reason = seg.text, "keep", "filled in order; fits"
        elif a.granted > 0:
            a.text, a.action = clip(seg.text, a.granted, estimate), "hard_cut"
            a.reason = f"hard cut at the limit by characters, no marker; {a.name} got {a.granted} tokens " \
                       f"at budget {budget}"
        else:
            a.action, a.reason = "drop", f"budget exhausted (filled in order); {a.name} got 0 tokens at budget {budget}"
        a.used = estimate(a.text) if a.text else 0
    return _plan("naive", allocs, budget, 0, 0, budget, False, 0, [])


def _priority(
    segments: Sequence[Segment], allocs: list[Allocation], budget: int, reserve: int, margin: int, estimate: Estimator,
    repeats: Sequence[tuple[str, list[list[int]]] | None], dedupe_across: bool = True,
) -> Plan:
    warnings: list[str] = []
    cap = figures.input_cap(budget, reserve, margin)
    if reserve + margin > budget:
        warnings.append(f"reserve + safety margin ({reserve + margin}) exceed the budget ({budget}); input cap is 0")
    texts = [s.text for s in segments]  # by position (allocs[i] is segments[i]'s), after lossless dedupe
    order = priority_order(allocs)

    # Lossless first: duplicates across segments, then repeated lines inside each segment.
    seen: dict[str, Allocation] = {}
    if dedupe_across:
        for a in order:
            if not (content_hash := a.content_hash):
                continue
            first = seen.get(content_hash)
            if first is None:  # the first with this content (pinned ones first) is the one kept
                seen[content_hash] = a
            elif not a.pinned:
                _mark_duplicate(a, first, "identical (normalized) to")
    near = [
        a for a in order
        if segments[a.position].near_dupes and not a.pinned and a.duplicate_of is None and texts[a.position]
    ] if any([s.near_dupes for s in segments]) else []
    if len(near) > 1:
        _, record = merge_near_duplicates([(a.name, texts[a.position]) for a in near])
        alloc_by_name = {a.name: a for a in allocs}
        for dup, info in record.data["merged"].items():
            _mark_duplicate(alloc_by_name[dup], alloc_by_name[info["into"]],
                            f"near-duplicate (5-gram jaccard {info['jaccard']:.2f}) of")
    saved = 0
    for seg, a, found in zip(segments, allocs, repeats, strict=True):  # allocs[i] is segments[i]'s
        a.requested = a.raw_tokens
        if a.duplicate_of is not None:
            saved += a.raw_tokens
            continue
        if a.pinned or not seg.text or (found is None and not seg.near_dupes):  # nothing lossless to do
            continue
        text = seg.text
        if found is not None:  # never for JSON: line dedupe would break it
            a.operations += (dedupe_record(text, *found, estimate),)
            text = found[0]
        if seg.near_dupes:
            text, rec = merge_near_duplicate_lines(text, estimate=estimate)
            if rec.data.get("merged"):
                a.operations += (rec,)
        texts[a.position] = text
        a.lossless = bool(a.operations)
        a.requested = estimate(text) if a.operations else a.raw_tokens
        saved += a.raw_tokens - a.requested

    # Pinned first, then floors, then weighted shares.
    pinned_tokens = sum([a.requested for a in allocs if a.pinned])
    over_budget = pinned_tokens > cap
    if over_budget:
        warnings.append(f"pinned segments need {pinned_tokens} tokens but the input cap is {cap}: "
                        "reduce hard segments, split the task or use a larger window")
    left = max(0, cap - pinned_tokens)
    others = [a for a in order if not a.pinned and a.duplicate_of is None]  # (-effective_priority, name) order
    # Segments holding pinned tools get their floor first: like pinned segments, those are never dropped.
    with_pinned_tools = [a for a in others
                         if segments[a.position].policy == "schema" and segments[a.position].pinned_lines]
    floors_order = others
    if with_pinned_tools:
        floors_order = [*with_pinned_tools, *(a for a in others if a not in with_pinned_tools)]
    for a in floors_order:
        seg = segments[a.position]
        if seg.min_tokens or seg.policy == "window" or (seg.policy == "schema" and seg.pinned_lines):
            floor = seg.min_tokens  # (else the floor is 0, as granted already is)
            if seg.policy == "window" and seg.pinned_lines:
                floor = max(floor, estimate("\n".join(seg.pinned_lines)) + 1)
            elif seg.policy == "schema" and seg.pinned_lines:  # the minimal form of its pinned tools
                floor = max(floor, pinned_tools_tokens(texts[a.position], seg.pinned_lines, estimate=estimate))
            a.floor = floor
            a.granted = min(floor, a.requested, left)
            left -= a.granted
    share(left, others)
    whole_or_nothing(others)

    scorer = memo(score_line)
    line_cjk: dict[str, int] = {}  # line -> CJK count, for the line plans made in this call
    apply_policies(segments, allocs, texts, budget, estimate, scorer, line_cjk)  # texts[i] is allocs[i]'s
    pinned_tools = [a for a in with_pinned_tools if any(op.data.get("over_budget") for op in a.operations)]
    if pinned_tools:  # kept whole in their minimal form past the cap, like pinned segments
        over_budget = True
        names = ", ".join(f"{a.name} ({a.used} tokens)" for a in pinned_tools)
        warnings.append(f"pinned tools of {names} do not fit the input cap {cap} even in their minimal form: "
                        "they are kept, never dropped; reduce hard segments, split the task or use a larger window")
    if pinned_tokens > cap:
        for a in allocs:
            if not a.pinned and a.action == "drop" and a.requested:
                a.reason = f"pinned segments ({pinned_tokens} tokens) exceed the input cap {cap}; " + a.reason
    return _plan("priority", allocs, budget, reserve, margin, cap, over_budget, saved, warnings)


def priority_order(allocs: Sequence[Allocation]) -> list[Allocation]:
    """Pinned first, then by effective priority (highest first), then by name."""
    # Three stable sorts, the least significant key first: on one attribute each, Python's sort
    # compares with its fast paths for str and int keys (a tuple key compares item by item).
    order = sorted(allocs, key=attrgetter("name"))
    order.sort(key=attrgetter("effective_priority"), reverse=True)  # reverse keeps ties in order
    order.sort(key=attrgetter("pinned"), reverse=True)
    return order


def _mark_duplicate(dup: Allocation, keep: Allocation, how: str) -> None:
    dup.duplicate_of = keep.name
    dup.action = "dedupe"
    dup.reason = f"{how} {keep.name}; provenance merged into it"
    keep.merged_sources += (dup.source_ref or dup.name,)


def _plan(
    mode: Literal["priority", "naive"], allocs: list[Allocation], budget: int, reserve: int, margin: int,
    cap: int, over_budget: bool, saved: int, warnings: list[str],
) -> Plan:
    used = sum([a.used for a in allocs])
    return Plan(
        mode=mode, budget=budget, reserve=reserve, safety_margin=margin, cap=cap, allocations=allocs,
        over_budget=over_budget, requested=sum([a.requested for a in allocs]),
        granted=sum([a.granted for a in allocs]), used=used, headroom=figures.headroom(cap, used), dedupe_saved=saved,
        starvation={}, warnings=warnings,
    )
