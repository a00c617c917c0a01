"""A call's manifest from what ctxkit decided (plan, layout, read-back, compaction, edits) and
what the provider reported (usage): :func:`build_manifest`.

It never builds a manifest the server would refuse: texts, reasons and names are clipped to the
schema's limits, over-long ids are shortened deterministically, lists are capped (with a warning
saying what was cut), and ``used_tokens <= granted_tokens`` holds for every item. What cannot be
repaired without guessing (an empty call id, a window of 0, a hand-made ``Usage`` whose cached
tokens exceed its input) raises ``ValueError`` at build time, where the bug is, instead of a 400
later on the worker thread.

Item ids are the segment names (stable from call to call); zone and position come from the
layout (or, without one, from concatenation order); only items that reach the model get a zone
and a position. Item text is what reached the model, optional (``include_text``) and passed
through the caller's ``redact`` function; the content hash of the original candidate is always
kept. Tool results and retrieved pages are labelled ``untrusted`` whatever their segment says
(``untrusted_kinds``): priority says how much an item matters, trust says whether it may instruct.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from ctxkit import figures
from ctxkit.context.tokens import Estimator, estimate_tokens
from ctxkit.manifest import (
    MAX_COMPACTIONS,
    MAX_EDITS,
    MAX_EVIDENCE,
    MAX_ITEMS,
    MAX_NAME,
    MAX_REASON,
    MAX_TEXT,
    MAX_TOKENS,
    SCHEMA_V1,
    AllocatorSettings,
    Budget,
    Builder,
    Claim,
    Compaction,
    ContextEdit,
    Evidence,
    Item,
    Manifest,
    Outcome,
    Prefix,
    Usage,
    convert_manifest,
    workspace_of,
)
from ctxkit.record.items import (
    UNTRUSTED_KINDS,
    clamp_tokens,
    clip,
    layout_items,
    opt_id,
    plan_items,
    record_items,
    sanitize_item,
    short_id,
)

if TYPE_CHECKING:  # the heavy modules are imported where they are used, not at import time
    from ctxkit.context.allocator import Plan
    from ctxkit.context.compaction import ClearResult, CompactionResult, Record
    from ctxkit.context.layout import Layout
    from ctxkit.context.readback import ReadBack

BUILDER_NAME = "ctxkit"
MAX_WARNINGS = 100
Redact = Callable[[str, Item], "str | None"]


def _version() -> str:
    from ctxkit.version import __version__

    return __version__


# --------------------------------------------------------------------------- #
# Normalising the parts


def _utc(value: datetime | None, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ValueError(f"{name} must be a datetime")
    # A naive time is taken as UTC: the server refuses times without a zone.
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _evidence(
    readback: Iterable[ReadBack | Evidence], outcome: Outcome | None
) -> list[Evidence]:
    cited: set[str] | None = None
    if outcome is not None and outcome.claims is not None:
        cited = {k for claim in outcome.claims for k in claim.evidence_keys}
    out: list[Evidence] = []
    for r in readback:
        if isinstance(r, Evidence):
            ev = msgspec.structs.replace(r)
        else:
            f = r.field
            ev = Evidence(
                key=f.evidence_key, label=f.label, literal=f.literal, expected_item=f.source,
                present=r.present, found_in=r.found_in,
            )
        ev.key = short_id(ev.key)
        ev.label = clip(ev.label, MAX_NAME)
        if ev.literal is not None:
            ev.literal = clip(ev.literal, MAX_REASON)
        ev.expected_item, ev.found_in = opt_id(ev.expected_item), opt_id(ev.found_in)
        if ev.used is None and cited is not None and ev.present:
            ev.used = ev.key in cited
        out.append(ev)
    return out


def _compactions(compactions: Iterable[CompactionResult | Compaction]) -> list[Compaction]:
    out: list[Compaction] = []
    for c in compactions:
        if not isinstance(c, Compaction):
            if not c.performed:
                continue  # nothing was folded: not an event
            c = c.to_manifest()
        else:
            c = msgspec.structs.replace(c)
        c.id = short_id(c.id)
        c.strategy, c.trigger = clip(c.strategy, MAX_NAME), clip(c.trigger, MAX_NAME)
        c.summary_item = opt_id(c.summary_item)
        c.invariants = [
            msgspec.structs.replace(
                inv, detail=clip(inv.detail, MAX_REASON), lost=[clip(x, MAX_NAME) for x in inv.lost[:MAX_EVIDENCE]]
            )
            for inv in c.invariants[:16]
        ]
        out.append(c)
    return out


def _edits(edits: Iterable[ClearResult | ContextEdit]) -> list[ContextEdit]:
    out: list[ContextEdit] = []
    for e in edits:
        if not isinstance(e, ContextEdit):
            if not e.applied:
                continue  # skipped because it would free too little: nothing changed
            e = e.to_manifest()
        else:
            e = msgspec.structs.replace(e)
        e.type = clip(e.type, MAX_NAME)
        e.item_ids = [short_id(i) for i in e.item_ids[:MAX_ITEMS]]
        out.append(e)
    return out


def _usage(usage: Any, provider: str, warnings: list[str]) -> Usage:
    if usage is None:
        return Usage()
    if isinstance(usage, Usage):
        # Built by hand: a wrong shape is the caller's bug; say so now, not as a 400 later.
        errors = []
        if usage.cache_read_tokens + usage.cache_write_tokens > usage.input_tokens:
            errors.append("cache_read_tokens + cache_write_tokens exceed input_tokens (input must include cached "
                          "tokens; normalize_usage does this for Anthropic)")
        if usage.reasoning_tokens is not None and usage.reasoning_tokens > usage.output_tokens:
            errors.append("reasoning_tokens exceed output_tokens")
        if any(v < 0 or v > MAX_TOKENS for v in msgspec.structs.astuple(usage) if v is not None):
            errors.append(f"token counts must be in 0..{MAX_TOKENS}")
        if errors:
            raise ValueError("usage: " + "; ".join(errors))
        return usage
    from ctxkit.record.usage import normalize_usage

    # A provider response comes from outside: its shape can change with an SDK version. An
    # unreadable one is a warning on the manifest, never a crash of the agent's loop.
    try:
        return normalize_usage(usage, provider or None)
    except ValueError:
        pass
    try:
        return normalize_usage(usage)
    except Exception as exc:
        warnings.append(clip(f"usage not recorded: {exc}", MAX_REASON))
        return Usage()


def _outcome(outcome: Outcome | None) -> Outcome | None:
    if outcome is None:
        return None
    out = msgspec.structs.replace(outcome, status=clip(outcome.status, MAX_NAME))
    if out.finish_reason is not None:
        out.finish_reason = clip(out.finish_reason, MAX_NAME)
    if out.claims is not None:
        out.claims = [
            Claim(text=clip(c.text, MAX_REASON), evidence_keys=[short_id(k) for k in c.evidence_keys[:MAX_EVIDENCE]])
            for c in out.claims[:MAX_EVIDENCE]
        ]
    return out


def _cap_items(items: list[Item]) -> tuple[list[Item], str | None]:
    """At most MAX_ITEMS: what reached the model first, the absent rest folded into one item."""
    if len(items) <= MAX_ITEMS:
        return items, None
    order = sorted(range(len(items)), key=lambda i: (not figures.in_context(items[i]), i))
    keep = sorted(order[: MAX_ITEMS - 1])
    rest = [items[i] for i in order[MAX_ITEMS - 1 :]]
    omitted = Item(
        id="ctxkit:omitted",
        kind="other",
        action="drop",
        requested_tokens=clamp_tokens(sum(i.requested_tokens for i in rest)),
        granted_tokens=0,
        used_tokens=0,
        reason=f"{len(rest)} more candidates not listed: a manifest holds at most {MAX_ITEMS} items",
    )
    warning = f"{len(rest)} candidates folded into item 'ctxkit:omitted' (limit {MAX_ITEMS} items)"
    return [items[i] for i in keep] + [omitted], warning


# --------------------------------------------------------------------------- #
# The one call


def build_manifest(
    *,
    call_id: str,
    run_id: str,
    step: int,
    model: str,
    plan: Plan | None = None,
    provider: str = "",
    agent: str = "default",
    layout: Layout | None = None,
    readback: Iterable[ReadBack | Evidence] = (),
    compactions: Iterable[CompactionResult | Compaction] = (),
    edits: Iterable[ClearResult | ContextEdit] = (),
    records: Iterable[Record] = (),
    extra_items: Iterable[Item] = (),
    usage: Any = None,
    started_at: datetime | None = None,
    ended_at: datetime | None = None,
    parent_call_id: str | None = None,
    parent_run_id: str | None = None,
    window: int | None = None,
    prefix: Prefix | None = None,
    include_text: bool = True,
    redact: Redact | None = None,
    untrusted_kinds: Collection[str] = UNTRUSTED_KINDS,
    outcome: Outcome | None = None,
    warnings: Iterable[str] = (),
    builder: Builder | None = None,
    estimate: Estimator = estimate_tokens,
    validate: bool | None = None,
    cwd: str = "",
    git_branch: str = "",
) -> Manifest:
    """One model call's manifest from its build and the provider's usage; see the module notes.

    ``usage``: a provider's raw usage or whole response (Anthropic, OpenAI chat/responses,
    Gemini, OpenTelemetry; ``provider`` is the hint, else it is detected) or a ``Usage``.
    ``redact(text, item) -> str | None`` sees each item's text with the item (kind, trust, id)
    and returns what to record (``None``: no text). ``window`` overrides the plan's budget as the
    model's window. ``records`` (history after clearing/compaction) adds an item per cleared or
    folded record; ``extra_items`` are added as they are (e.g. :func:`projection_items`).
    ``validate=True`` runs the server's own check (``convert_manifest``) on the result, about 0.4x
    a ``json.dumps`` of it; a failure raises ``ValueError``. ``None`` (the default) runs it only
    when the caller handed in a manifest part built by hand (see :func:`hand_made_parts`): what
    ctxkit builds from a plan, layout, read-back, records and usage is valid by construction
    (clamped, clipped or repaired with a warning), which sdk/tests/test_manifest_contract.py
    checks over generated inputs; ``False`` never runs it. ``cwd`` and ``git_branch``: where the
    agent works, shown and filterable on the runs list (a value the schema would refuse is left out).
    """
    readback, compactions, edits, extra_items = list(readback), list(compactions), list(edits), list(extra_items)
    if validate is None:
        validate = hand_made_parts(prefix=prefix, builder=builder, extra_items=extra_items, outcome=outcome,
                                   readback=readback, compactions=compactions, edits=edits)
    notes: list[str] = []  # what had to be repaired, recorded as warnings
    started, ended = _call_times(call_id, run_id, step, started_at, ended_at)
    budget = _budget(plan, window, notes)
    items = _items(
        _candidates(plan, layout, records, extra_items, untrusted_kinds, estimate, notes),
        layout, include_text, redact, notes,
    )
    evidence = _evidence(readback, outcome)
    if evidence:  # (the item ids are needed only to check some)
        evidence = _evidence_of_items(evidence, {i.id for i in items}, notes)
    if prefix is None and layout is not None and layout.segments:
        # Segment text follows the items' rule; a redacting agent gets line hashes only.
        prefix = layout.to_prefix(include_text=include_text and redact is None)
    manifest = Manifest(
        schema=SCHEMA_V1,
        call_id=short_id(call_id),
        run_id=short_id(run_id),
        step=step,
        model=clip(model, MAX_NAME),
        started_at=started,
        ended_at=ended,
        budget=budget,
        provider=clip(provider, MAX_NAME),
        agent=clip(agent, MAX_NAME),
        parent_call_id=opt_id(parent_call_id),
        parent_run_id=opt_id(parent_run_id),
        builder=builder or Builder(name=BUILDER_NAME, version=_version()),
        prefix=prefix,
        usage=_usage(usage, provider, notes),
        items=items,
        evidence=evidence,
        compactions=_latest(_compactions(compactions), MAX_COMPACTIONS, "compactions", notes),
        context_edits=_latest(_edits(edits), MAX_EDITS, "context edits", notes),
        outcome=_outcome(outcome),
        allocator=(AllocatorSettings(mode=plan.mode, estimator=plan.estimator, held_back=plan.held_back)
                   if plan is not None else None),
        workspace=workspace_of(cwd, git_branch),
    )
    manifest.warnings = _warnings(plan, layout, warnings, notes)  # last: every step above may add a note
    if validate:
        _validate(manifest)
    return manifest


# The steps of build_manifest, in order.


def _call_times(
    call_id: str, run_id: str, step: int, started_at: datetime | None, ended_at: datetime | None
) -> tuple[datetime, datetime | None]:
    """Check the call's identity; its start (now if not given) and end, in UTC."""
    if not call_id or not run_id:
        raise ValueError("call_id and run_id must not be empty")
    if not 0 <= step <= 10_000_000:
        raise ValueError("step must be in 0..10000000")
    started = _utc(started_at, "started_at") or datetime.now(UTC)
    ended = _utc(ended_at, "ended_at")
    if ended is not None and ended < started:
        raise ValueError("ended_at is before started_at")
    return started, ended


def _budget(plan: Plan | None, window: int | None, notes: list[str]) -> Budget:
    """The window is the plan's budget unless the caller knows better; reserve and margin fit in it."""
    win = window if window is not None else (plan.budget if plan is not None else 0)
    if win <= 0:
        raise ValueError("the window must be > 0: pass a plan with a positive budget or window=")
    win = min(win, MAX_TOKENS)
    if plan is None:
        return Budget(window=win)
    reserve = min(clamp_tokens(plan.reserve), win)
    margin = min(clamp_tokens(plan.safety_margin), win - reserve)
    if (reserve, margin) != (plan.reserve, plan.safety_margin):
        notes.append(f"output reserve + safety margin ({plan.reserve + plan.safety_margin}) exceed the window {win}; "
                     "recorded clipped to it")
    return Budget(window=win, output_reserve=reserve, safety_margin=margin, input_cap=min(clamp_tokens(plan.cap), win))


def _candidates(
    plan: Plan | None, layout: Layout | None, records: Iterable[Record], extra_items: Iterable[Item],
    untrusted_kinds: Collection[str], estimate: Estimator, notes: list[str],
) -> list[tuple[Item, str]]:
    """Every item with the text that reached the model: the plan's, then layout blocks the plan
    does not know (a restated constraint, the question), then cleared/folded history records,
    then the caller's own. Ids must differ."""
    pairs = plan_items(plan, untrusted_kinds, notes) if plan is not None else []
    records = list(records)  # (iterated once, as before)
    if layout is not None or records:  # the plan's items by id: what the layout and records must not repeat
        by_id = {item.id: item for item, _ in pairs}
        if layout is not None:
            pairs += layout_items(layout, by_id, untrusted_kinds=untrusted_kinds)
        pairs += [(i, "") for i in record_items(records, skip=by_id, untrusted_kinds=untrusted_kinds,
                                                estimate=estimate)]
    pairs += [(sanitize_item(i), i.text or "") for i in extra_items]
    ids = [item.id for item, _ in pairs]
    if len(set(ids)) != len(ids):  # name the first repeated id
        seen: set[str] = set()
        for item_id in ids:
            if item_id in seen:
                raise ValueError(
                    f"duplicate item id {item_id!r}: segment, block, record and extra item ids must differ"
                )
            seen.add(item_id)
    return pairs


def _items(
    pairs: list[tuple[Item, str]], layout: Layout | None, include_text: bool, redact: Redact | None, notes: list[str]
) -> list[Item]:
    """Place the items that reach the model (zone and position from the layout, else in order),
    keep ``used <= granted``, attach (redacted) text, and cap the list at MAX_ITEMS."""
    positions = layout.positions() if layout is not None else None
    position = 0
    items: list[Item] = []
    for item, text in pairs:
        present = figures.in_context(item) and bool(text or item.used_tokens)
        if positions is not None:
            placed = positions.get(item.id) if present else None
            item.zone, item.position = placed if placed is not None else (item.zone, item.position)
        elif present and item.position is None:
            item.position = position
        if not present:
            item.zone = item.position = None
        position += present
        if item.used_tokens is not None and item.granted_tokens is not None and item.used_tokens > item.granted_tokens:
            notes.append(f"item {item.id!r}: used {item.used_tokens} > granted {item.granted_tokens}; "
                         "recorded as granted")
            item.used_tokens = item.granted_tokens
        if include_text and text and present:
            if redact is not None:
                redacted = redact(text, item)
                text = redacted if isinstance(redacted, str) else ""
            item.text = clip(text, MAX_TEXT) if text else None
        else:
            item.text = None
        items.append(item)
    items, note = _cap_items(items)
    if note:
        notes.append(note)
    return items


def _evidence_of_items(evidence: list[Evidence], ids: set[str], notes: list[str]) -> list[Evidence]:
    """Evidence whose item references all exist, at most MAX_EVIDENCE entries."""
    for ev in evidence:
        for name in ("expected_item", "found_in"):
            ref = getattr(ev, name)
            if ref is not None and ref not in ids:
                notes.append(f"evidence {ev.key!r}: {name} {ref!r} is not an item of this call; left out")
                setattr(ev, name, None)
    if len(evidence) > MAX_EVIDENCE:
        notes.append(f"{len(evidence) - MAX_EVIDENCE} evidence entries left out (limit {MAX_EVIDENCE})")
        evidence = evidence[:MAX_EVIDENCE]
    return evidence


def _latest(events: list[Any], limit: int, what: str, notes: list[str]) -> list[Any]:
    """At most ``limit`` events, the latest (they matter most)."""
    if len(events) <= limit:
        return events
    notes.append(f"{len(events) - limit} {what} left out (limit {limit})")
    return events[-limit:]


def _warnings(plan: Plan | None, layout: Layout | None, warnings: Iterable[str], notes: list[str]) -> list[str]:
    """The plan's, the layout's, the caller's and the builder's warnings, at most MAX_WARNINGS."""
    out = [*(plan.warnings if plan is not None else ()), *(layout.warnings if layout else ()), *warnings, *notes]
    if len(out) > MAX_WARNINGS:
        extra = len(out) - MAX_WARNINGS + 1
        out = out[: MAX_WARNINGS - 1] + [f"{extra} more warnings left out"]
    return [clip(w, MAX_REASON) for w in out]


def hand_made_parts(
    *, prefix: Prefix | None, builder: Builder | None, extra_items: Sequence[Item], outcome: Outcome | None,
    readback: Sequence[ReadBack | Evidence], compactions: Sequence[CompactionResult | Compaction],
    edits: Sequence[ClearResult | ContextEdit],
) -> bool:
    """Whether build_manifest gets a manifest struct the caller may have made by hand: msgspec
    checks nothing when a struct is constructed, so only the server's check catches a bad value
    there. Everything else comes from ctxkit's own types and is valid by construction."""
    return (
        prefix is not None
        or builder is not None
        or bool(extra_items)
        or outcome is not None
        or any(isinstance(r, Evidence) for r in readback)
        or any(isinstance(c, Compaction) for c in compactions)
        or any(isinstance(e, ContextEdit) for e in edits)
    )


def _validate(manifest: Manifest) -> None:
    """The server's own check; a failure is a bug in ctxkit, raised where it happened."""
    _, errors = convert_manifest(msgspec.to_builtins(manifest))
    if errors:
        raise ValueError("ctxkit built an invalid manifest: " + "; ".join(f"{e.path}: {e.message}" for e in errors))
