"""Compaction of a long history, with survival checks, and clearing of old tool results.

Two tools, to be used in this order:

1. :func:`clear_tool_results` (light compaction): old tool results are replaced by a
   placeholder that keeps a ref. No model call, deterministic, reversible. It breaks the
   cache prefix, so it only acts when it frees at least ``clear_at_least`` tokens.
2. :func:`compact`: the history before the last ``keep_last`` turns is folded into a
   three-section summary (settled facts / open items / hard constraints). History is never
   rewritten: the folded records stay in ``new_history`` marked ``compacted_by`` the summary,
   the summary is appended as a new record, and the input list is left untouched. After the
   fold four invariants are checked (pending obligations, active operations, user
   constraints, required evidence); a failure is reported with the literal items lost. A
   pending obligation that a sectioned summary files anywhere but under open items counts as
   lost (misfiled): a promise filed as a hard constraint no longer reads as work to do.
   :func:`survival_checks` runs the same checks on a compaction an agent did itself.

Compaction is triggered by window occupancy (:func:`should_compact`), never by turn count:
one tool result can weigh as much as twenty turns of chat.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ctxkit import figures
from ctxkit.context.summary import (  # noqa: F401  (re-exported)
    Summary,
    conversation_language,
    extractive_summarizer,
)
from ctxkit.context.tokens import Estimate, resolve_estimate
from ctxkit.manifest import (
    MAX_EVIDENCE,
    MAX_ITEMS,
    MAX_NAME,
    MAX_REASON,
    Compaction,
    ContextEdit,
    Invariant,
    InvariantName,
)

# --------------------------------------------------------------------------- #
# Records


@dataclass(frozen=True, slots=True)
class Record:
    """One entry of the history (a message or a tool result).

    Frozen: compaction and clearing return new records and never change the caller's.
    ``turn`` groups records into turns; when it is None a new turn starts at each
    ``user`` record. ``pinned`` records (and ``system`` ones) are never folded.
    """

    id: str
    role: str
    text: str
    kind: str = ""
    turn: int | None = None
    tool_name: str | None = None
    ref: str | None = None
    pinned: bool = False
    compacted_by: str | None = None
    cleared: bool = False

    def __post_init__(self) -> None:
        if not self.kind:
            kind = "tool_result" if self.role == "tool" else "system" if self.role == "system" else "history"
            object.__setattr__(self, "kind", kind)

    @property
    def live(self) -> bool:
        """Whether the record still reaches the model (not folded into a summary)."""
        return self.compacted_by is None

    @property
    def foldable(self) -> bool:
        return self.live and not self.pinned and self.role != "system"


def _tokens(records: Sequence[Record], estimate: Estimate) -> int:
    return sum(estimate(r.text) for r in records)


def should_compact(occupied_tokens: int, window: int, threshold: float = 0.8) -> bool:
    """True when the window is at least ``threshold`` full (occupancy, not turn count)."""
    if window <= 0:
        raise ValueError("window must be positive")
    if not 0 < threshold <= 1:
        raise ValueError("threshold must be in (0, 1]")
    return figures.window_utilization(occupied_tokens, window) >= threshold


# --------------------------------------------------------------------------- #
# Summaries (ctxkit.context.summary)

Summarizer = Callable[[Sequence[Record]], "Summary | str"]


# --------------------------------------------------------------------------- #
# Compaction


@dataclass(frozen=True)
class InvariantCheck:
    """One invariant after compaction; ``lost`` holds the literal items not found."""

    name: InvariantName
    ok: bool
    checked: int
    lost: list[str]
    absent_before: list[str]
    misfiled: list[str] = field(default_factory=list)  # in ``lost``: present, but not as an open item

    @property
    def detail(self) -> str:
        if not self.checked:
            return "nothing declared to check"
        if self.ok:
            return f"all {self.checked} present after compaction"
        text = f"{len(self.lost)} of {self.checked} missing after compaction"
        notes = []
        if self.absent_before:
            notes.append(f"{len(self.absent_before)} already missing before it")
        if self.misfiled:
            notes.append(f"{len(self.misfiled)} filed in the summary, but not under open items")
        return text + (f" ({'; '.join(notes)})" if notes else "")

    def to_manifest(self) -> Invariant:
        # The manifest caps names at MAX_NAME characters and lists at MAX_EVIDENCE entries.
        lost = [item[:MAX_NAME] for item in self.lost[:MAX_EVIDENCE]]
        return Invariant(name=self.name, ok=self.ok, detail=self.detail[:MAX_REASON], lost=lost)


@dataclass(frozen=True)
class CompactionResult:
    performed: bool
    new_history: list[Record]
    summary: Record | None
    folded_ids: list[str]
    kept_turns: int
    tokens_before: int
    tokens_after: int
    invariants: list[InvariantCheck]
    compaction_id: str
    strategy: str
    trigger: str = ""
    distortion: float = 0.0

    @property
    def saved_ratio(self) -> float:
        """Share of the tokens saved, 1 - after/before (2199 -> 701 is 68.1%)."""
        return 1 - self.tokens_after / self.tokens_before if self.tokens_before else 0.0

    @property
    def kept_ratio(self) -> float:
        """Share of the tokens kept, after/before: r = |C(x, b)| / |x|."""
        return self.tokens_after / self.tokens_before if self.tokens_before else 1.0

    @property
    def ok(self) -> bool:
        return all(inv.ok for inv in self.invariants)

    @property
    def failed(self) -> list[InvariantCheck]:
        return [inv for inv in self.invariants if not inv.ok]

    def model_records(self) -> list[Record]:
        """The records that go to the model: everything not folded into a summary."""
        return [r for r in self.new_history if r.live]

    def to_manifest(self) -> Compaction:
        if not self.performed:
            raise ValueError("nothing was compacted; do not record a compaction event")
        return Compaction(
            id=self.compaction_id,
            strategy=self.strategy[:MAX_NAME],
            tokens_before=self.tokens_before,
            tokens_after=self.tokens_after,
            trigger=self.trigger[:MAX_NAME],
            kept_turns=self.kept_turns,
            summary_item=self.summary.id if self.summary else None,
            invariants=[inv.to_manifest() for inv in self.invariants],
        )


def _turn_starts(history: Sequence[Record]) -> list[int]:
    """Indexes in ``history`` where a turn of foldable records begins."""
    starts: list[int] = []
    current: object = None
    anonymous = 0
    for index, record in enumerate(history):
        if not record.foldable:
            continue
        if record.turn is not None:
            key: object = ("turn", record.turn)
        elif record.role == "user" or current is None:
            anonymous += 1
            key = ("anon", anonymous)
        else:
            key = current
        if key != current:
            starts.append(index)
            current = key
    return starts


_WS = re.compile(r"\s+")


def _norm(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _check(
    name: InvariantName, items: Sequence[str], before: str, after: str, where: str | None = None
) -> InvariantCheck:
    """Which ``items`` are not in ``after``; with ``where`` (the part of ``after`` they must be in),
    an item found in ``after`` but not there is lost too, and listed as misfiled."""
    wanted = list(dict.fromkeys(i for i in items if _norm(i)))
    found_in = after if where is None else where
    lost = [i for i in wanted if _norm(i) not in found_in]
    absent_before = [i for i in lost if _norm(i) not in before]
    misfiled = [i for i in lost if where is not None and _norm(i) in after]
    return InvariantCheck(name=name, ok=not lost, checked=len(wanted), lost=lost, absent_before=absent_before,
                          misfiled=misfiled)


def compact(
    history: Sequence[Record],
    *,
    keep_last: int,
    summarizer: Summarizer = extractive_summarizer,
    constraints: Sequence[str] = (),
    obligations: Sequence[str] = (),
    active_operations: Sequence[str] = (),
    required_evidence: Sequence[str] = (),
    elsewhere: str = "",
    estimate: Estimate | None = None,
    trigger: str = "",
    strategy: str | None = None,
    summary_id: str | None = None,
) -> CompactionResult:
    """Fold everything before the last ``keep_last`` turns into one summary record.

    The four lists are literal strings that must still be findable (whitespace-normalised,
    case-sensitive: identifiers are compared verbatim) in the records that reach the model
    after compaction, or in ``elsewhere`` (text outside the history that also reaches the
    model, such as the system prompt). ``history`` is not modified.

    Distortion d is the share of checked items present before compaction and missing after
    it: what this compaction lost, not what was never there.
    """
    if keep_last < 0:
        raise ValueError("keep_last must be >= 0")
    estimate = resolve_estimate(estimate)
    history = list(history)  # a shallow copy: the caller's list is never touched
    starts = _turn_starts(history)
    kept_turns = min(keep_last, len(starts))
    cut = starts[len(starts) - kept_turns] if kept_turns else len(history)
    fold_idx = [i for i in range(cut) if history[i].foldable]
    strategy = strategy or ("extractive" if summarizer is extractive_summarizer else _name(summarizer))
    live_before = [r for r in history if r.live]
    tokens_before = _tokens(live_before, estimate)
    before_text = _norm("\n".join([r.text for r in live_before] + [elsewhere]))
    digest = hashlib.sha256("\x1f".join(history[i].id for i in fold_idx).encode()).hexdigest()[:12]
    summary_id = summary_id or f"summary-{digest}"

    if not fold_idx:
        invariants = _invariants(constraints, obligations, active_operations, required_evidence, before_text, "")
        return CompactionResult(
            performed=False,
            new_history=history,
            summary=None,
            folded_ids=[],
            kept_turns=kept_turns,
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            invariants=invariants,
            compaction_id=f"compaction-{digest}",
            strategy=strategy,
            trigger=trigger,
        )

    produced = summarizer([history[i] for i in fold_idx])
    text = produced.render() if isinstance(produced, Summary) else str(produced)
    summary = Record(id=summary_id, role="user", text=text, kind="summary")
    folded = set(fold_idx)
    new_history = [replace(r, compacted_by=summary_id) if i in folded else r for i, r in enumerate(history[:cut])]
    new_history += [summary, *history[cut:]]

    live_after = [r for r in new_history if r.live]
    after_text = _norm("\n".join([r.text for r in live_after] + [elsewhere]))
    # A pending obligation the summary files as a settled fact or a hard constraint reads as done
    # or as a rule: with a sectioned summary it must be under open items (or outside the summary).
    pending_text = None
    if isinstance(produced, Summary):
        outside = [r.text for r in live_after if r.id != summary_id]
        pending_text = _norm("\n".join([*produced.open_items, *outside, elsewhere]))
    invariants = _invariants(constraints, obligations, active_operations, required_evidence, before_text, after_text,
                             pending_text)
    present = sum(inv.checked - len(inv.absent_before) for inv in invariants)
    lost_now = sum(len(inv.lost) - len(inv.absent_before) for inv in invariants)
    return CompactionResult(
        performed=True,
        new_history=new_history,
        summary=summary,
        folded_ids=[history[i].id for i in fold_idx],
        kept_turns=kept_turns,
        tokens_before=tokens_before,
        tokens_after=_tokens(live_after, estimate),
        invariants=invariants,
        compaction_id=f"compaction-{digest}",
        strategy=strategy,
        trigger=trigger,
        distortion=lost_now / present if present else 0.0,
    )


def _invariants(
    constraints: Sequence[str],
    obligations: Sequence[str],
    active_operations: Sequence[str],
    required_evidence: Sequence[str],
    before: str,
    after: str,
    pending: str | None = None,
) -> list[InvariantCheck]:
    after = after or before  # no compaction: the context after is the context before
    return [
        _check("pending_obligations", obligations, before, after, pending),
        _check("active_operations", active_operations, before, after),
        _check("user_constraints", constraints, before, after),
        _check("required_evidence", required_evidence, before, after),
    ]


def survival_checks(
    *,
    before: str,
    after: str,
    constraints: Sequence[str] = (),
    obligations: Sequence[str] = (),
    active_operations: Sequence[str] = (),
    required_evidence: Sequence[str] = (),
) -> list[InvariantCheck]:
    """The four invariants of :func:`compact` for a compaction done elsewhere (an agent that
    compacts itself): each literal is looked up, whitespace-normalised, in the context the model
    saw before the compaction (``before``) and after it (``after``)."""
    # An empty context after the compaction is still a context (" "), not "no compaction".
    return _invariants(constraints, obligations, active_operations, required_evidence, _norm(before),
                       _norm(after) or " ")


def _name(func: object) -> str:
    return str(getattr(func, "__name__", type(func).__name__))


# --------------------------------------------------------------------------- #
# Context editing: clearing old tool results


@dataclass(frozen=True)
class ClearResult:
    applied: bool
    records: list[Record]
    cleared_ids: list[str]
    cleared_tokens: int
    kept: int
    reason: str
    edit_type: str = "clear_tool_uses"  # or "clear_thinking" (ctxkit.context.editing)

    def to_manifest(self) -> ContextEdit:
        if not self.applied:
            raise ValueError(f"nothing was cleared ({self.reason}); do not record a context edit")
        return ContextEdit(
            type=self.edit_type,
            cleared_count=len(self.cleared_ids),
            cleared_tokens=self.cleared_tokens,
            kept=self.kept,
            item_ids=self.cleared_ids[:MAX_ITEMS],
        )


def placeholder(record: Record, tokens: int) -> str:
    return f"[cleared tool result: ref={record.ref or record.id}, {tokens} tokens]"


def clear_tool_results(
    records: Sequence[Record],
    *,
    keep_last: int = 3,
    clear_at_least: int = 0,
    exclude_tools: Sequence[str] = (),
    estimate: Estimate | None = None,
) -> ClearResult:
    """Replace every live tool result but the last ``keep_last`` with a placeholder.

    Clearing changes the middle of the message sequence, so everything after it must be
    written to the cache again; unless the clearing frees at least ``clear_at_least`` tokens
    (net of the placeholders) nothing is changed and ``applied`` is False.
    """
    if keep_last < 0 or clear_at_least < 0:
        raise ValueError("keep_last and clear_at_least must be >= 0")
    estimate = resolve_estimate(estimate)
    records = list(records)
    results = [i for i, r in enumerate(records) if r.kind == "tool_result" and r.live and not r.cleared]
    excluded = set(exclude_tools)
    keep = set(results[len(results) - keep_last :]) if keep_last else set()
    targets = [i for i in results if i not in keep and records[i].tool_name not in excluded]
    replaced: dict[int, Record] = {}
    freed = 0
    for i in targets:
        original = estimate(records[i].text)
        text = placeholder(records[i], original)
        saved = original - estimate(text)
        if saved <= 0:
            continue  # a result smaller than its placeholder stays as it is
        replaced[i] = replace(records[i], text=text, cleared=True)
        freed += saved
    kept = len(results) - len(replaced)
    if not replaced or freed < clear_at_least:
        reason = f"would free {freed} tokens, below clear_at_least={clear_at_least}" if replaced else "nothing to clear"
        return ClearResult(
            applied=False, records=records, cleared_ids=[], cleared_tokens=0, kept=len(results), reason=reason
        )
    new_records = [replaced.get(i, r) for i, r in enumerate(records)]
    cleared_ids = [records[i].id for i in sorted(replaced)]
    return ClearResult(
        applied=True,
        records=new_records,
        cleared_ids=cleared_ids,
        cleared_tokens=freed,
        kept=kept,
        reason=f"cleared {len(cleared_ids)} tool results, freed {freed} tokens",
    )
