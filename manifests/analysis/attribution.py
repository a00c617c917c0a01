"""Drop attribution (seed 004): why a required piece of evidence did not help.

Each missing piece of evidence gets exactly one cause, chosen from the decision
recorded for the item it should have come from; present evidence the answer did
not rest on is "not used"; present evidence in the middle of the context gets a
"middle zone" risk flag. Every attribution names the item and copies the decision
(action + reason), so the user can check it against the manifest.
"""

from __future__ import annotations

from ctxkit.record.manifest import Evidence as ManifestEvidence
from ctxkit.record.manifest import Item as ManifestItem
from manifests.analysis.data import CallData, clean
from manifests.models import Attribution

FIXES = {
    Attribution.NEVER_CANDIDATE: (
        "Retrieval: the evidence never reached the candidates. Index the source, widen or fix the query, "
        "or inject it as structured state (P0/P1 items are not chosen by similarity)."
    ),
    Attribution.BUDGET: (
        "Budget policy: the allocator dropped or cut the item. Raise its priority or pin it, reserve "
        "budget for required evidence, or shrink lower-priority items first."
    ),
    Attribution.TRUNCATED: (
        "Truncation policy: the cut removed the span that held the evidence. Keep that span "
        "(head/tail ratio, extraction of key lines) or replace the text by a reference that can be read back."
    ),
    Attribution.COMPACTION: (
        "Compactor: the summary or compression lost it. Keep required evidence and constraints verbatim, "
        "check invariants after compacting, and fall back to extraction or a larger budget when a check fails."
    ),
    Attribution.NOT_USED: (
        "Model / prompt: the evidence was in the context but the answer did not rest on it. Ask for claims "
        "with evidence ids, restate it in the final checklist, place it at the head or tail, or try another model."
    ),
    Attribution.MIDDLE_ZONE: (
        "Layout (risk): the evidence sat in the middle of the context, where models use it least (Lost in the "
        "Middle). Put key constraints at the head and current evidence at the tail."
    ),
}

# The decision on the expected item -> the cause of a missing piece of evidence.
CAUSE_OF_ACTION = {
    "drop": Attribution.BUDGET,
    "hard_cut": Attribution.BUDGET,
    "dedupe": Attribution.BUDGET,
    "truncate": Attribution.TRUNCATED,
    "ref": Attribution.TRUNCATED,
    "summarize": Attribution.COMPACTION,
    "compress": Attribution.COMPACTION,
    "extract": Attribution.COMPACTION,
    "clear": Attribution.COMPACTION,
    # Kept whole and still without the evidence: the item never held it, so retrieval
    # fetched the wrong thing.
    "keep": Attribution.NEVER_CANDIDATE,
}

# Middle zone when the item has no zone: the middle half of the context by token offset.
MIDDLE_LOW, MIDDLE_HIGH = 0.25, 0.75


def _norm(text: str | None) -> str:
    return " ".join((text or "").split()).casefold()


def _lost_in_compaction(data: CallData, ev: ManifestEvidence) -> tuple[str | None, str] | None:
    """(summary item, detail) of the first compaction whose failed invariant lists this
    evidence (by key, label or literal) among what it lost."""
    names = {_norm(x) for x in (ev.key, ev.label, ev.literal) if x}
    for comp in data.manifest.compactions:
        for inv in comp.invariants:
            if inv.ok:
                continue
            if any(_norm(lost) in names for lost in inv.lost):
                detail = inv.detail or f"invariant {inv.name} failed"
                return comp.summary_item, f"compaction {comp.id} ({comp.strategy}): {detail}"
    return None


def _row(
    data: CallData, index: int, ev: ManifestEvidence, cause: str, item: ManifestItem | None, item_id: str | None,
    *, action: str = "", reason: str = "",
) -> Attribution:
    call = data.call
    return Attribution(
        project_id=call.project_id,
        call=call,
        evidence_id=data.evidence_pks[index] if index < len(data.evidence_pks) else None,
        evidence_key=clean(ev.key),
        cause=cause,
        fix=FIXES[cause],
        item_id=clean(item.id if item is not None else item_id),
        action=action or (item.action if item is not None else ""),
        # The decision as recorded, after what the analysis found (when it found more).
        reason=clean("; ".join(x for x in (reason, item.reason if item is not None else "") if x)),
        is_risk=cause == Attribution.MIDDLE_ZONE,
        started_at=call.started_at,
    )


def _missing_cause(data: CallData, ev: ManifestEvidence, items: dict[str, ManifestItem]) -> tuple[str, str | None, str]:
    """(cause, item id, reason override) for evidence that did not reach the model."""
    lost = _lost_in_compaction(data, ev)
    if lost is not None:
        summary_item, detail = lost
        return Attribution.COMPACTION, summary_item or ev.expected_item, detail
    item = items.get(ev.expected_item) if ev.expected_item else None
    if item is None:
        why = (
            f"no candidate item {ev.expected_item!r} in this call"
            if ev.expected_item
            else "no candidate item was expected to carry it and none did"
        )
        return Attribution.NEVER_CANDIDATE, ev.expected_item, why
    cause = CAUSE_OF_ACTION.get(item.action, Attribution.NEVER_CANDIDATE)
    if cause == Attribution.NEVER_CANDIDATE:
        return cause, item.id, f"item {item.id!r} was kept whole but did not contain the evidence"
    return cause, item.id, ""


def attribute(data: CallData, positions: dict[str, float]) -> list[Attribution]:
    m = data.manifest
    items = data.items_by_id
    cited = data.cited_keys
    out: list[Attribution] = []
    for index, ev in enumerate(m.evidence):
        if not ev.present:
            cause, item_id, reason = _missing_cause(data, ev, items)
            item = items.get(item_id) if item_id else None
            out.append(_row(data, index, ev, cause, item, item_id, reason=reason))
            continue
        where = ev.found_in or ev.expected_item
        item = items.get(where) if where else None
        used = ev.used
        if used is None and cited is not None:
            used = ev.key in cited
        if used is False:
            why = "the answer's claims do not cite it" if ev.used is None else "marked not used by the answer"
            out.append(_row(data, index, ev, Attribution.NOT_USED, item, where, reason=why))
        if item is None:
            continue
        middle = (
            item.zone == "middle"
            if item.zone is not None
            else item.id in positions and MIDDLE_LOW <= positions[item.id] <= MIDDLE_HIGH
        )
        if middle:
            where_text = "zone middle" if item.zone else f"at {positions[item.id]:.0%} of the context"
            out.append(
                _row(data, index, ev, Attribution.MIDDLE_ZONE, item, where,
                     reason=f"item {item.id!r} placed in the middle ({where_text})")
            )
    return out
