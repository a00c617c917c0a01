"""Budget allocator (seed 001, 5.8.1): reserve output, pin hard segments, floors, share by priority.

API notes
---------
``allocate(segments, *, budget, reserve=0, safety_margin=0, estimate=estimate_tokens, naive=False,
aging=None, aging_step=1) -> Plan``

1. ``cap = budget - reserve - safety_margin`` (>= 0). The reserve is output space: input never
   consumes it, even when the pinned segments do not fit.
2. Exact duplicates across segments (same normalized content) and, among segments with
   ``near_dupes=True``, near-duplicates (5-gram Jaccard >= 0.75) become action ``dedupe``; the
   survivor (higher effective priority, then name) records their sources in ``merged_sources``.
   Inside each non-pinned segment exact repeated lines are removed (``dedupe=True``) and, with
   ``near_dupes=True``, near-duplicate lines merged with a visible note. ``requested`` is
   counted after this lossless step; ``raw_tokens`` before it.
3. Pinned segments (``policy="pin"``) are kept whole and charged first. If they alone exceed
   the cap, ``over_budget=True`` and every other segment gets 0: capacity is never faked.
4. Floors: in order ``(-effective_priority, name)`` each segment gets
   ``min(min_tokens, requested, left)`` (for ``window`` at least its pinned lines).
5. The rest is shared by weight (= effective priority): ``int(pool * w / W)`` capped at need,
   as the seed's published numbers do (a fixed pool, not the shrinking ``left`` of its
   shortened snippet). What capped segments leave is shared again among the others (water
   filling); the last tokens from rounding go one each in ``(-effective_priority, name)`` order.
   Segments with priority 0 only get what the weighted ones leave.
6. Each segment is cut to its grant by its policy (operators module). ``used <= granted``
   always; a segment whose grant buys nothing is ``drop``.

Aging (seed 5.3.2): ``aging`` maps segment name -> number of consecutive previous calls in which
it was starved (dropped for lack of budget). Its effective priority is
``priority + aging_step * count``; it sorts and weighs by that. ``Plan.starvation`` gives the
counts to pass to the next call (starved now: count + 1; got in: removed), so a low-priority
segment rises until it gets in once and then falls back to its own priority.

``naive=True`` reproduces the seed's ``--naive``: concatenation order, no reserve, no dedupe, no
pinning, hard cut at the limit without a marker.

``Plan`` (``to_dict()`` is JSON-serialisable): mode, budget, reserve, safety_margin, cap,
allocations (input order), over_budget, requested, granted, used, headroom (= cap - used;
negative only when over budget), dedupe_saved, starvation, warnings; ``outputs()`` maps
segment name -> text, ``text()`` joins them, ``get(name)``, ``to_budget()`` -> manifest Budget.
``Allocation``: name, kind, policy, priority, effective_priority, pinned, trust, zone,
source_ref, position, raw_tokens, requested, granted, used, action (manifest Action), reason,
text, content_hash, operations (OpRecord list), merged_sources, duplicate_of;
``to_item(include_text=False)`` -> manifest Item.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ctxkit.manifest import ITEM_KINDS, Budget, Item
from ctxkit.operators import (
    OpRecord,
    compress_schema,
    content_key,
    dedupe_lines,
    extract_lines,
    merge_near_duplicate_lines,
    merge_near_duplicates,
    ref_replace,
    sliding_window,
    summarize_lines,
    truncate_head_tail,
)
from ctxkit.tokens import Estimator, clip, estimate_tokens

Policy = Literal["pin", "extract", "summarize", "truncate", "ref", "window", "schema", "drop"]
POLICIES: tuple[str, ...] = Policy.__args__  # type: ignore[attr-defined]

# The manifest action a policy produces when it has to shrink its segment.
POLICY_ACTION = {
    "extract": "extract",
    "summarize": "summarize",
    "truncate": "truncate",
    "ref": "ref",
    "window": "truncate",
    "schema": "compress",
    "drop": "drop",
}


@dataclass(frozen=True, slots=True)
class Segment:
    """One candidate for the context.

    ``priority`` is a weight (value / replaceability, seed 5.3.2), 0..1000 as in the manifest;
    ``trust`` is separate from it on purpose (a web page can matter and still be only data).
    ``keep_recent``: lines kept verbatim by ``summarize``; maximum turns for ``window`` (0 = as
    many as fit). ``pinned_lines``: lines that ``extract``/``summarize``/``window`` keep first.
    ``why``: for ``ref``, why the reference matters.
    """

    name: str
    kind: str
    text: str
    priority: int = 50
    policy: Policy = "truncate"
    min_tokens: int = 0
    trust: Literal["trusted", "untrusted"] = "trusted"
    source_ref: str | None = None
    zone: Literal["head", "middle", "tail"] | None = None
    dedupe: bool = True
    near_dupes: bool = False
    keep_recent: int = 3
    head_ratio: float = 0.55
    pinned_lines: tuple[str, ...] = ()
    why: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("segment name must not be empty")
        if self.kind not in ITEM_KINDS:
            raise ValueError(f"segment {self.name!r}: kind {self.kind!r} is not one of {ITEM_KINDS}")
        if self.policy not in POLICIES:
            raise ValueError(f"segment {self.name!r}: policy {self.policy!r} is not one of {POLICIES}")
        if not 0 <= self.priority <= 1000:
            raise ValueError(f"segment {self.name!r}: priority must be in 0..1000")
        if self.min_tokens < 0 or self.keep_recent < 0:
            raise ValueError(f"segment {self.name!r}: min_tokens and keep_recent must be >= 0")
        if not 0.0 < self.head_ratio < 1.0:
            raise ValueError(f"segment {self.name!r}: head_ratio must be between 0 and 1")

    @property
    def pinned(self) -> bool:
        return self.policy == "pin"


@dataclass(slots=True)
class Allocation:
    """What the allocator did with one segment."""

    name: str
    kind: str
    policy: str
    priority: int
    effective_priority: int
    pinned: bool
    trust: str
    zone: str | None
    source_ref: str | None
    position: int
    raw_tokens: int
    requested: int
    granted: int = 0
    used: int = 0
    action: str = "keep"
    reason: str = ""
    text: str = ""
    content_hash: str = ""
    operations: list[OpRecord] = field(default_factory=list)
    merged_sources: list[str] = field(default_factory=list)
    duplicate_of: str | None = None

    def to_dict(self, include_text: bool = True) -> dict[str, Any]:
        out = {
            "name": self.name,
            "kind": self.kind,
            "policy": self.policy,
            "priority": self.priority,
            "effective_priority": self.effective_priority,
            "pinned": self.pinned,
            "trust": self.trust,
            "zone": self.zone,
            "source_ref": self.source_ref,
            "position": self.position,
            "raw_tokens": self.raw_tokens,
            "requested": self.requested,
            "granted": self.granted,
            "used": self.used,
            "action": self.action,
            "reason": self.reason,
            "content_hash": self.content_hash,
            "operations": [op.to_dict() for op in self.operations],
            "merged_sources": list(self.merged_sources),
            "duplicate_of": self.duplicate_of,
        }
        if include_text:
            out["text"] = self.text
        return out

    def to_item(self, include_text: bool = False) -> Item:
        """The manifest Item for this allocation (requested_tokens = after lossless dedupe)."""
        return Item(
            id=self.name,
            kind=self.kind,  # type: ignore[arg-type]
            action=self.action,  # type: ignore[arg-type]
            requested_tokens=self.requested,
            granted_tokens=self.granted,
            used_tokens=self.used,
            priority=self.priority,
            pinned=self.pinned,
            trust=self.trust,  # type: ignore[arg-type]
            zone=self.zone,  # type: ignore[arg-type]
            position=self.position,
            reason=self.reason[:2000],
            source_ref=self.source_ref,
            content_hash=self.content_hash or None,
            text=self.text if include_text else None,
        )


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
) -> Plan:
    """Allocate ``budget`` among ``segments``; see the module docstring for the rules."""
    if budget < 0 or reserve < 0 or safety_margin < 0:
        raise ValueError("budget, reserve and safety_margin must be >= 0")
    names = [s.name for s in segments]
    if len(set(names)) != len(names):
        raise ValueError("segment names must be unique (they become manifest item ids)")
    aging = aging or {}
    allocs = [
        Allocation(
            name=s.name, kind=s.kind, policy=s.policy, priority=s.priority,
            effective_priority=s.priority + aging_step * max(0, aging.get(s.name, 0)),
            pinned=s.pinned and not naive, trust=s.trust, zone=s.zone, source_ref=s.source_ref,
            position=i, raw_tokens=estimate(s.text), requested=0, content_hash=content_key(s.text) if s.text else "",
        )
        for i, s in enumerate(segments)
    ]
    if naive:
        plan = _naive(segments, allocs, budget, estimate)
    else:
        plan = _priority(segments, allocs, budget, reserve, safety_margin, estimate)
    plan.starvation = {
        a.name: aging.get(a.name, 0) + 1 for a in plan.allocations if a.action == "drop" and a.requested > 0
    }
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


def _order_key(a: Allocation) -> tuple[int, str]:
    return (-a.effective_priority, a.name)


def _priority(
    segments: Sequence[Segment], allocs: list[Allocation], budget: int, reserve: int, margin: int, estimate: Estimator
) -> Plan:
    warnings: list[str] = []
    cap = max(0, budget - reserve - margin)
    if reserve + margin > budget:
        warnings.append(f"reserve + safety margin ({reserve + margin}) exceed the budget ({budget}); input cap is 0")
    by_name = {s.name: s for s in segments}
    alloc_by_name = {a.name: a for a in allocs}
    texts = {s.name: s.text for s in segments}
    order = sorted(allocs, key=lambda a: (not a.pinned, *_order_key(a)))

    # Lossless first: duplicates across segments, then repeated lines inside each segment.
    seen: dict[str, Allocation] = {}
    for a in order:
        if not a.content_hash:
            continue
        if a.content_hash in seen and not a.pinned:
            _mark_duplicate(a, seen[a.content_hash], "identical (normalized) to")
        else:
            seen.setdefault(a.content_hash, a)
    near = [
        a for a in order if by_name[a.name].near_dupes and not a.pinned and a.duplicate_of is None and texts[a.name]
    ]
    if len(near) > 1:
        _, record = merge_near_duplicates([(a.name, texts[a.name]) for a in near])
        for dup, info in record.data["merged"].items():
            _mark_duplicate(alloc_by_name[dup], alloc_by_name[info["into"]],
                            f"near-duplicate (5-gram jaccard {info['jaccard']:.2f}) of")
    saved = 0
    for a in allocs:
        seg = by_name[a.name]
        a.requested = a.raw_tokens
        if a.duplicate_of is not None:
            saved += a.raw_tokens
            continue
        if a.pinned or not seg.text:
            continue
        text = seg.text
        if seg.dedupe and "\n" in text and text.lstrip()[:1] not in ("{", "["):  # line dedupe would break JSON
            text, rec = dedupe_lines(text, estimate=estimate)
            if rec.data["removed"]:
                a.operations.append(rec)
        if seg.near_dupes:
            text, rec = merge_near_duplicate_lines(text, estimate=estimate)
            if rec.data.get("merged"):
                a.operations.append(rec)
        texts[a.name] = text
        a.requested = estimate(text) if a.operations else a.raw_tokens
        saved += a.raw_tokens - a.requested

    # Pinned first, then floors, then weighted shares.
    pinned_tokens = sum(a.requested for a in allocs if a.pinned)
    over_budget = pinned_tokens > cap
    if over_budget:
        warnings.append(f"pinned segments need {pinned_tokens} tokens but the input cap is {cap}: "
                        "reduce hard segments, split the task or use a larger window")
    left = max(0, cap - pinned_tokens)
    others = sorted((a for a in allocs if not a.pinned and a.duplicate_of is None), key=_order_key)
    for a in others:
        seg = by_name[a.name]
        floor = seg.min_tokens
        if seg.policy == "window" and seg.pinned_lines:
            floor = max(floor, estimate("\n".join(seg.pinned_lines)) + 1)
        a.granted = min(floor, a.requested, left)
        left -= a.granted
    _share(left, others)

    for a in allocs:
        _apply(by_name[a.name], a, texts[a.name], budget, estimate)
    if over_budget:
        for a in allocs:
            if not a.pinned and a.action == "drop" and a.requested:
                a.reason = f"pinned segments ({pinned_tokens} tokens) exceed the input cap {cap}; " + a.reason
    return _plan("priority", allocs, budget, reserve, margin, cap, over_budget, saved, warnings)


def _mark_duplicate(dup: Allocation, keep: Allocation, how: str) -> None:
    dup.duplicate_of = keep.name
    dup.action = "dedupe"
    dup.reason = f"{how} {keep.name}; provenance merged into it"
    keep.merged_sources.append(dup.source_ref or dup.name)


def _share(pool: int, others: list[Allocation]) -> None:
    """Water-fill ``pool`` over the segments' remaining needs by effective priority."""
    weighted = [a for a in others if a.requested > a.granted and a.effective_priority > 0]
    unweighted = [a for a in others if a.requested > a.granted and a.effective_priority <= 0]
    for group, equal in ((weighted, False), (unweighted, True)):
        if pool <= 0 or not group:
            continue

        def weight(a: Allocation, equal: bool = equal) -> int:
            return 1 if equal else a.effective_priority

        need = {a.name: a.requested - a.granted for a in group}
        level_pool, level_weight = pool, sum(weight(a) for a in group)
        by_ratio = sorted(group, key=lambda a: (need[a.name] / weight(a), *_order_key(a)))
        unsaturated: list[Allocation] = []
        for index, a in enumerate(by_ratio):
            if need[a.name] * level_weight <= level_pool * weight(a):  # capped below its share
                a.granted += need[a.name]
                level_pool -= need[a.name]
                level_weight -= weight(a)
            else:
                unsaturated = by_ratio[index:]
                break
        handed = 0
        for a in unsaturated:
            add = level_pool * weight(a) // level_weight
            a.granted += add
            handed += add
        rest = level_pool - handed  # < len(unsaturated): one token each, in priority order
        for a in sorted(unsaturated, key=_order_key)[:rest]:
            a.granted += 1
        pool = 0 if unsaturated else level_pool


def _apply(seg: Segment, a: Allocation, text: str, budget: int, estimate: Estimator) -> None:
    """Cut the segment to its grant by its policy and explain it."""
    if a.duplicate_of is not None:
        return
    if a.pinned:
        a.granted, a.text, a.used, a.action = a.requested, text, a.requested, "keep"
        a.reason = "pinned: kept whole and charged first (never compressed)"
        return
    notes = [op.detail for op in a.operations]  # lossless dedupe done before allocation
    whole = a.requested <= a.granted  # then the text is the (deduped) segment as counted
    if whole:
        a.text, a.action = text, ("compress" if a.operations else "keep")
        notes.append("fits whole")
    elif a.granted <= 0:
        a.action = "drop"
        notes.append("no budget left after pinned segments and higher priorities")
    else:
        out, rec = _run_policy(seg, text, a.granted, estimate)
        if estimate(out) > a.granted and seg.policy != "ref":  # overshot: a marked cut, else nothing
            out, rec = truncate_head_tail(out, a.granted, ref=seg.source_ref, estimate=estimate)
        if out and estimate(out) > a.granted:
            out = ""
        a.operations.append(rec)
        a.text = out
        a.action = POLICY_ACTION[seg.policy] if out else "drop"
        notes.append(rec.detail if out else f"{seg.policy} could not fit anything useful")
    notes.append(f"{a.name} got {a.granted} tokens at budget {budget}")
    if a.effective_priority != a.priority:
        notes.append(f"aged priority {a.effective_priority}")
    a.reason = "; ".join(notes)
    a.used = a.requested if whole else estimate(a.text) if a.text else 0


def _run_policy(seg: Segment, text: str, grant: int, estimate: Estimator) -> tuple[str, OpRecord]:
    ref = seg.source_ref
    if seg.policy == "extract":
        return extract_lines(text, grant, ref=ref, pinned=seg.pinned_lines, estimate=estimate)
    if seg.policy == "summarize":
        return summarize_lines(text, grant, keep_recent=seg.keep_recent, ref=ref, pinned=seg.pinned_lines,
                               estimate=estimate)
    if seg.policy == "truncate":
        return truncate_head_tail(text, grant, ref=ref, head_ratio=seg.head_ratio, estimate=estimate)
    if seg.policy == "ref":
        return ref_replace(text, ref=ref, why=seg.why, estimate=estimate)
    if seg.policy == "window":
        pins = set(seg.pinned_lines)
        turns = [line for line in text.split("\n") if line.strip() and line not in pins]
        return sliding_window(turns, budget=grant, max_turns=seg.keep_recent or None, pinned=seg.pinned_lines,
                              estimate=estimate)
    if seg.policy == "schema":
        return compress_schema(text, grant, estimate=estimate)
    before = estimate(text)
    return "", OpRecord("drop", before, 0, "policy drop: kept only when it fits whole")


def _plan(
    mode: Literal["priority", "naive"], allocs: list[Allocation], budget: int, reserve: int, margin: int,
    cap: int, over_budget: bool, saved: int, warnings: list[str],
) -> Plan:
    used = sum(a.used for a in allocs)
    return Plan(
        mode=mode, budget=budget, reserve=reserve, safety_margin=margin, cap=cap, allocations=allocs,
        over_budget=over_budget, requested=sum(a.requested for a in allocs),
        granted=sum(a.granted for a in allocs), used=used, headroom=cap - used, dedupe_saved=saved,
        starvation={}, warnings=warnings,
    )
