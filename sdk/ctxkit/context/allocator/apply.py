"""Cutting each segment to its grant by its policy, and the reason it gives (allocator step 7).

Used by :mod:`ctxkit.context.allocator`. The budget-independent half
of ``extract``, ``summarize`` and ``schema`` (lines ranked and costed, schema steps rendered)
is kept across calls in :mod:`ctxkit.context.allocator.cache` when the estimator is the default one, so
only the cut at this call's grant is redone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ctxkit.context.allocator import cache as alloc_cache
from ctxkit.context.operators.common import OpRecord
from ctxkit.context.operators.extract import LinePlan, Scorer, cut_lines, plan_extract, plan_summary, sliding_window
from ctxkit.context.operators.schema import SchemaPlan, compress_schema, cut_schema, plan_schema
from ctxkit.context.operators.truncate import ref_replace, truncate_head_tail
from ctxkit.context.tokens import Estimator, is_default_estimator
from ctxkit.manifest import Action, Policy

if TYPE_CHECKING:
    from ctxkit.context.allocator.types import Allocation, Segment

# The manifest action a policy produces when it has to shrink its segment.
POLICY_ACTION: dict[Policy, Action] = {
    "extract": "extract",
    "summarize": "summarize",
    "truncate": "truncate",
    "ref": "ref",
    "window": "truncate",
    "schema": "compress",
    "drop": "drop",
}


def apply_policy(
    seg: Segment, a: Allocation, text: str, budget: int, estimate: Estimator, scorer: Scorer,
    line_cjk: dict[str, int] | None = None,
) -> None:
    """Cut the segment to its grant by its policy and explain it. ``scorer`` and ``line_cjk`` (line ->
    CJK count) are memos for one call, shared by its segments' line plans."""
    apply_policies((seg,), (a,), (text,), budget, estimate, scorer, line_cjk)


def apply_policies(
    segments: Sequence[Segment], allocs: Sequence[Allocation], texts: Sequence[str], budget: int,
    estimate: Estimator, scorer: Scorer, line_cjk: dict[str, int] | None = None,
) -> None:
    """:func:`apply_policy` for each segment, its allocation and its (deduped) text, in one loop (the
    allocator's step 7 for every segment of a call: one Python call for all)."""
    for seg, a, text in zip(segments, allocs, texts, strict=True):
        if a.duplicate_of is not None:
            continue
        if a.pinned:
            a.granted, a.text, a.used, a.action = a.requested, text, a.requested, "keep"
            a.reason = "pinned: kept whole and charged first (never compressed)"
            continue
        # The reason: the lossless dedupe done before allocation, what happens here, the grant.
        ops = a.operations
        earlier = ("; ".join([op.detail for op in ops]) if len(ops) > 1 else ops[0].detail) if ops else ""
        granted = a.granted
        if a.requested <= granted:  # whole: the text is the (deduped) segment as counted
            a.text, a.action, a.used = text, ("compress" if ops else "keep"), a.requested
            note = "fits whole"
        elif granted <= 0 and not (seg.policy == "schema" and seg.pinned_lines):  # pinned tools: never dropped
            a.action = "drop"
            note = "no budget left after pinned segments and higher priorities"
        else:
            out, rec = _run_policy(seg, text, granted, estimate, scorer, line_cjk)
            used = rec.tokens_after  # every operator's record counts its output with this estimate
            if rec.data.get("over_budget"):  # pinned tools that do not fit: kept and charged, the plan is over
                a.granted = granted = used
            if used > granted and seg.policy != "ref":  # overshot: a marked cut, else nothing
                out, rec = truncate_head_tail(out, granted, ref=seg.source_ref, estimate=estimate)
                used = estimate(out)
            if out and used > granted:
                out = ""
            a.operations = (*ops, rec)
            a.text, a.used = out, (used if out else 0)
            a.action = POLICY_ACTION[seg.policy] if out else "drop"
            note = rec.detail if out else f"{seg.policy} could not fit anything useful"
        if earlier:
            note = f"{earlier}; {note}"
        if a.effective_priority != a.priority:
            a.reason = f"{note}; {a.name} got {granted} tokens at budget {budget}; aged priority {a.effective_priority}"
        else:
            a.reason = f"{note}; {a.name} got {granted} tokens at budget {budget}"


def _nothing_fits(policy: str, text: str, estimate: Estimator) -> OpRecord:
    """The record ``cut_lines`` makes when the one line of ``text`` does not fit (kept none)."""
    total = estimate(text)
    if policy == "extract":
        detail = "kept 0/1 lines by score (numbers, negations, units, refs, failures)"
    else:
        detail = "kept 0 failure-evidence lines and the last 0 turns"
    return OpRecord(policy, total, 0, detail, {"kept_lines": [], "omitted_tokens": total})


def _run_policy(
    seg: Segment, text: str, grant: int, estimate: Estimator, scorer: Scorer, line_cjk: dict[str, int] | None = None,
) -> tuple[str, OpRecord]:
    """The policy's cut of ``text`` to ``grant`` and its record."""
    ref = seg.source_ref
    if seg.policy in ("extract", "summarize"):
        # Ranking lines and costing them does not depend on the grant: with the default estimator
        # (whose costs are then part of the plan) it is kept across calls and only the cut is redone.
        default = is_default_estimator(estimate)
        if default and ref is None and "\n" not in text:
            # One line that does not fit and no ref for a marker alone: cut_lines keeps nothing
            # (the line costs estimate(line + "\n") >= the whole text's, over the grant), so no
            # plan is made. Most such texts are history turns dropped on a tight budget.
            return "", _nothing_fits(seg.policy, text, estimate)
        key = (seg.policy, text, tuple(seg.pinned_lines), seg.keep_recent)  # a list would not hash
        plan = alloc_cache.plan(key) if default else None
        if not isinstance(plan, LinePlan):
            if seg.policy == "extract":
                plan = plan_extract(text, pinned=seg.pinned_lines, estimate=estimate, scorer=scorer, line_cjk=line_cjk)
            else:
                plan = plan_summary(text, keep_recent=seg.keep_recent, pinned=seg.pinned_lines, estimate=estimate,
                                    scorer=scorer, line_cjk=line_cjk)
            if default:
                alloc_cache.keep_plan(key, text, plan)
        return cut_lines(plan, grant, ref=ref, estimate=estimate)
    if seg.policy == "truncate":
        return truncate_head_tail(text, grant, ref=ref, head_ratio=seg.head_ratio, estimate=estimate)
    if seg.policy == "ref":
        return ref_replace(text, ref=ref, why=seg.why, estimate=estimate)
    if seg.policy == "window":
        pins = set(seg.pinned_lines)
        turns = [line for line in text.split("\n") if line.strip() and line not in pins]
        return sliding_window(turns, budget=grant, max_turns=seg.keep_recent or None, pinned=seg.pinned_lines,
                              estimate=estimate, scorer=scorer)
    if seg.policy == "schema":  # every step's rendering is grant-independent too
        pinned = seg.pinned_lines  # for a schema: names of tools that are never dropped
        if not is_default_estimator(estimate):
            return compress_schema(text, grant, estimate=estimate, pinned=pinned)
        schema = alloc_cache.plan(("schema", text))
        if not isinstance(schema, SchemaPlan) or grant < schema.least_budget:
            # Rendered as far as this grant needs; a smaller grant in a later call plans again.
            schema = plan_schema(text, estimate=estimate, least_budget=max(grant, 0))
            alloc_cache.keep_plan(("schema", text), text, schema)
        return cut_schema(schema, text, grant, estimate=estimate, pinned=pinned)
    before = estimate(text)
    return "", OpRecord("drop", before, 0, "policy drop: kept only when it fits whole")
