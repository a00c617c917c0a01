"""What-if replay: run ctxkit's allocator again on a stored call at another budget or reserve.

The call's items are turned back into allocator segments (requested tokens, priority,
pinned, a policy chosen from the action taken and the item's kind, and the text when
the agent sent it), allocated again with ``ctxkit.context.allocator.allocate``, and each item's
and each required evidence's fate is compared with what really happened.

Approximation, said on the page too: an item whose full text was not sent is modelled
by filler of its requested size (a private-use character worth ``unit`` tokens), so
its cut is exact in tokens but evidence inside it can only be judged by how much of it
survives: kept whole = present, dropped = missing, cut = at risk. Where the text was
sent, evidence is read back from the replayed outputs literally (``ctxkit.context.readback``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ctxkit import figures
from ctxkit.context.allocator import Segment, allocate
from ctxkit.context.operators import MARKER_RE
from ctxkit.context.readback import KeyField, read_back
from ctxkit.context.tokens import Estimator, estimate_tokens
from ctxkit.record.manifest import MAX_TOKENS
from manifests.models import Call, Evidence, Item

FILL = "\ue000"  # a private-use character: never in real text, never matched by a literal
FILL_PER_LINE = 32
MAX_FILL_CHARS = 50_000  # bounds the work whatever the requested sizes (up to 100M tokens an item)
SKIPPED_ACTIONS = {"dedupe": "a duplicate of another item; its content is counted there",
                   "clear": "cleared by a context edit, not by the allocator"}

_BY_ACTION = {"summarize": "summarize", "truncate": "truncate", "hard_cut": "truncate", "extract": "extract",
              "ref": "ref"}
_BY_KIND = {"tools": "schema", "history": "summarize", "tool_result": "truncate", "retrieval": "extract",
            "memory": "extract", "summary": "extract", "state": "truncate", "example": "drop"}


class ReplayError(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


def policy_for(item: Item) -> str:
    """The allocator policy that best explains what the agent did with the item."""
    if item.pinned:
        return "pin"
    if item.action in _BY_ACTION:
        return _BY_ACTION[item.action]
    if item.action == "compress":
        return "schema" if item.kind == "tools" else "extract"
    return _BY_KIND.get(item.kind, "truncate")


def _estimator(unit: int) -> Estimator:
    def estimate(text: str) -> int:
        fill = text.count(FILL)
        if not fill:
            return estimate_tokens(text)
        return fill * unit + estimate_tokens(text.replace(FILL, ""))

    return estimate


def _filler(tokens: int, unit: int) -> str:
    """Filler that ``_estimator(unit)`` counts as exactly ``tokens``: lines of FILL characters
    (so line-based operators can keep part of it), padded with dots for the remainder."""
    n = tokens // unit
    while n > 0 and n * unit + math.ceil((math.ceil(n / FILL_PER_LINE) - 1) / 4) > tokens:
        n -= 1
    lines = [FILL * FILL_PER_LINE] * (n // FILL_PER_LINE)
    if n % FILL_PER_LINE:
        lines.append(FILL * (n % FILL_PER_LINE))
    newlines = max(0, len(lines) - 1)
    rest = tokens - n * unit - math.ceil(newlines / 4)
    pad = 4 * (math.ceil(newlines / 4) + rest) - newlines if rest > 0 else 0
    return "\n".join(lines) + "." * pad


def _parts(item: Item) -> tuple[str, str]:
    """The sent text split where the cut was: (head, tail). A head/tail cut's marker is
    taken out, since the replay puts the omitted middle back in its place."""
    sent = item.text or ""
    marker = MARKER_RE.search(sent)
    if marker is not None:
        return sent[: marker.start()], sent[marker.end():]
    return sent, ""


def _source_text(parts: tuple[str, str], missing: int, unit: int) -> str:
    """The text the segment is rebuilt from: the sent text, with filler for what was cut."""
    head, tail = parts
    if missing <= 0:
        return head + (("\n" + tail) if tail else "")
    return "\n".join(p for p in (head, _filler(missing, unit), tail) if p)


@dataclass(frozen=True)
class Params:
    budget: int
    reserve: int
    safety_margin: int


def parse_params(query: Any, call: Call) -> Params:
    """``budget``, ``reserve`` and ``margin`` from a query string; defaults are the call's own."""

    def number(name: str, default: int, minimum: int) -> int:
        raw = str(query.get(name, "")).strip()
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ReplayError(name, f"{raw!r} is not an integer") from None
        if not minimum <= value <= MAX_TOKENS:
            raise ReplayError(name, f"must be between {minimum} and {MAX_TOKENS}")
        return value

    budget = number("budget", call.window, 1)
    reserve = number("reserve", call.output_reserve, 0)
    margin = number("margin", call.safety_margin, 0)
    if reserve + margin > budget:
        raise ReplayError("reserve", f"reserve + safety margin ({reserve + margin}) exceed the budget ({budget})")
    return Params(budget=budget, reserve=reserve, safety_margin=margin)


def replay(call: Call, items: list[Item], evidence: list[Evidence], params: Params) -> dict[str, Any]:
    """Allocate the call's items again under ``params``; see the module docstring."""
    replayable = [i for i in items if i.action not in SKIPPED_ACTIONS]
    parts = {i.item_id: _parts(i) for i in replayable}
    sent_tokens = {name: estimate_tokens("\n\n".join(p for p in ps if p)) for name, ps in parts.items()}
    missing = {i.item_id: max(0, i.requested_tokens - sent_tokens[i.item_id]) for i in replayable}
    unit = max(1, math.ceil(sum(missing.values()) / MAX_FILL_CHARS))
    estimate = _estimator(unit)
    segments = [
        Segment(
            name=i.item_id,
            kind=i.kind,
            text=_source_text(parts[i.item_id], missing[i.item_id], unit),
            priority=i.priority,
            policy=policy_for(i),  # type: ignore[arg-type]
            trust=i.trust,  # type: ignore[arg-type]
            source_ref=i.source_ref,
            zone=i.zone,  # type: ignore[arg-type]
            dedupe=False,  # the stored request is already after the agent's lossless steps
        )
        for i in replayable
    ]
    plan = allocate(segments, budget=params.budget, reserve=params.reserve, safety_margin=params.safety_margin,
                    estimate=estimate)
    by_name = {a.name: a for a in plan.allocations}
    # The same replay at the call's own budget is the baseline a change is measured against:
    # the manifest does not record everything the agent's allocator knew (floors, policies),
    # so even at its own budget the replay can differ a little from what happened.
    own = Params(budget=call.window, reserve=call.output_reserve, safety_margin=call.safety_margin)
    base_plan = plan if own == params else allocate(
        segments, budget=own.budget, reserve=own.reserve, safety_margin=own.safety_margin, estimate=estimate)
    base = {a.name: a for a in base_plan.allocations}

    rows = []
    for i in replayable:
        a = by_name[i.item_id]
        actual_used = figures.context_tokens(i)
        b = base[i.item_id]
        rows.append({
            "id": i.item_id,
            "kind": i.kind,
            "zone": i.zone,
            "trust": i.trust,
            "policy": a.policy,
            "requested": i.requested_tokens,
            "actual": {"action": i.action, "granted": i.granted_tokens, "used": actual_used},
            "replay": {"action": a.action, "granted": a.granted, "used": a.used, "reason": a.reason[:300]},
            "baseline": {"action": b.action, "used": b.used},
            "changed": a.action != b.action or a.used != b.used,
        })
    outputs = plan.outputs()
    texts = {i.item_id: i.text for i in replayable}
    whole = {name for name, n in missing.items() if n == 0 and texts.get(name)}
    ev_rows = [_evidence(e, by_name, texts, outputs, whole) for e in evidence]
    base_outputs = base_plan.outputs()
    for row, e in zip(ev_rows, evidence, strict=True):
        row["baseline"] = _evidence(e, base, texts, base_outputs, whole)["replay"]
    same = sum(1 for r in rows if r["baseline"]["action"] == r["actual"]["action"])
    in_context = [a for a in plan.allocations if a.used > 0]
    return {
        "call_id": call.call_id,
        "params": {"budget": params.budget, "reserve": params.reserve, "safety_margin": params.safety_margin},
        "actual": {"budget": call.window, "reserve": call.output_reserve, "safety_margin": call.safety_margin,
                   "cap": call.input_cap},
        "cap": plan.cap,
        "used": plan.used,
        "headroom": plan.headroom,
        "over_budget": plan.over_budget,
        "warnings": plan.warnings,
        "items": rows,
        "evidence": ev_rows,
        "skipped": [{"id": i.item_id, "action": i.action, "why": SKIPPED_ACTIONS[i.action]}
                    for i in items if i.action in SKIPPED_ACTIONS],
        "summary": {
            "items": len(rows),
            "in_context": len(in_context),
            "whole": sum(1 for a in in_context if a.used >= a.requested),
            "cut": sum(1 for a in in_context if a.used < a.requested),
            "dropped": len(rows) - len(in_context),
            "evidence_total": len(ev_rows),
            "evidence_present": sum(1 for e in ev_rows if e["replay"] == "present"),
            "evidence_at_risk": sum(1 for e in ev_rows if e["replay"] == "at risk"),
            "baseline_same_action": same,
        },
        "unit": unit,
    }


def _evidence(e: Evidence, allocs: dict[str, Any], texts: dict[str, str | None], outputs: dict[str, str],
              whole: set[str]) -> dict:
    """Would this evidence reach the model in the replay? Read back literally where the
    carrier's text is known; otherwise judged by how much of the carrier survives."""
    carrier = e.found_in or e.expected_item
    row = {"key": e.key, "label": e.label, "carrier": carrier, "actual": e.present}
    a = allocs.get(carrier) if carrier else None
    if a is None:
        return {**row, "replay": "present" if e.present else "missing",
                "why": "no carrier item to replay; unchanged"}
    if e.literal and texts.get(carrier):
        found = read_back([KeyField(e.label or e.key, e.literal, carrier, key=e.key)], outputs)[0]
        if found.present:
            return {**row, "replay": "present", "why": f"literal read back in {found.found_in}"}
        if carrier in whole:  # the whole text was sent: not finding the literal is final
            return {**row, "replay": "missing",
                    "why": f"literal not in the replayed context; {carrier}: {a.action}, {a.used}/{a.requested} tokens"}
    if a.used <= 0:
        return {**row, "replay": "missing", "why": f"{carrier} would be {a.action}"}
    if a.used >= a.requested:
        return {**row, "replay": "present",
                "why": f"{carrier} would be kept whole ({a.used} tokens)"}
    return {**row, "replay": "at risk",
            "why": f"{carrier} cut to {a.used}/{a.requested} tokens ({a.action}); the part not sent is unknown"}
