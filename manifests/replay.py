"""What-if replay: run ctxkit's allocator again on a stored call at another budget or reserve.

The call's items are turned back into allocator segments and allocated again with
``ctxkit.context.allocator.allocate``; each item's and each required evidence's fate is
compared with what really happened.

**Exact** when ctxkit built the call (docs/manifest.md, "Replay settings"): the manifest then
records the allocator's mode and estimator, and for each of its candidates the policy, the floor
it applied, the priority after aging and whether lossless steps ran. Those are what the
allocator's arithmetic depends on besides the requested tokens, so at the call's own budget
every grant comes out as the agent's. A cut's content depends on the full text, which the
manifest does not hold: where the replayed grant equals the recorded one, the cut is the one
recorded (the same deterministic operator on the same text at the same grant); only at other
grants is the policy run on a model of the text. Items the allocator never saw (a constraint
the layout restated, the question, cleared history, the agent's own items) are left as they were.

**Approximate** otherwise (another builder, an older ctxkit): each item's policy is assumed
from the action taken and its kind, floors are 0 and priorities unaged; the result says so and
why, and the page shows it. The call's estimator is used when the server can run it
(``ctxkit.context.tokens.estimator_by_name``), else ctxkit's default, also said.

Text: an item whose full text was not sent is modelled as the sent part plus filler (a
private-use character) for the rest, counted as exactly its requested tokens; evidence in it
is judged by how much of the item survives: kept whole = present, dropped = missing, cut = at
risk. Where the text the model read is known, evidence is read back from it literally
(``ctxkit.context.readback``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec

from ctxkit import figures
from ctxkit.context.allocator import Allocation, Plan, Segment, allocate
from ctxkit.context.operators import MARKER_RE
from ctxkit.context.readback import KeyField, read_back
from ctxkit.context.tokens import Estimator, estimate_tokens, estimator_by_name
from ctxkit.manifest import MAX_TOKENS, AllocatorSettings, ItemAllocation, Policy, Zone, is_action, is_item_kind
from manifests.models import Call, Evidence, Item

FILL = "\ue000"  # a private-use character: never in real text, never matched by a literal
FILL_PER_LINE = 32
MAX_FILL_CHARS = 50_000  # bounds the work whatever the requested sizes (up to 100M tokens an item)
SKIPPED_ACTIONS = {"dedupe": "a duplicate of another item; its content is counted there",
                   "clear": "cleared by a context edit, not by the allocator"}
NOT_ALLOCATED = "not a candidate of the allocator (placed by the layout, cleared history or added by the agent)"

# Without recorded settings: the policy that best explains the action taken, else the kind's usual one.
_BY_ACTION: dict[str, Policy] = {
    "summarize": "summarize", "truncate": "truncate", "hard_cut": "truncate", "extract": "extract", "ref": "ref",
}
_BY_KIND: dict[str, Policy] = {
    "tools": "schema", "history": "summarize", "tool_result": "truncate", "retrieval": "extract",
    "memory": "extract", "summary": "extract", "state": "truncate", "example": "drop",
}


class ReplayError(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


_ZONES: dict[str, Zone] = {"head": "head", "middle": "middle", "tail": "tail"}  # a stored zone, typed


def assumed_policy(item: Item) -> Policy:
    """For a call without replay settings only: the policy that best explains what was done."""
    if item.pinned:
        return "pin"
    if item.action in _BY_ACTION:
        return _BY_ACTION[item.action]
    if item.action == "compress":
        return "schema" if item.kind == "tools" else "extract"
    return _BY_KIND.get(item.kind, "truncate")


class _ItemSettings(msgspec.Struct):
    id: str
    allocation: ItemAllocation | None = None


class _Settings(msgspec.Struct):
    """The replay settings of a stored manifest (other fields are not decoded)."""

    allocator: AllocatorSettings | None = None
    items: list[_ItemSettings] = []


@dataclass(frozen=True)
class Fidelity:
    """Whether the replay at the call's own budget is exact, and if not, why."""

    exact: bool
    mode: str
    estimator: str
    allocations: dict[str, ItemAllocation]
    why: list[str]
    held_back: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"exact": self.exact, "mode": self.mode, "estimator": self.estimator, "why": self.why,
                "held_back": self.held_back}


def fidelity(call: Call) -> Fidelity:
    """Read the call's replay settings from its stored manifest."""
    try:
        settings = msgspec.json.decode(call.raw or "{}", type=_Settings)
    except (msgspec.DecodeError, msgspec.ValidationError):
        settings = _Settings()
    allocations = {i.id: i.allocation for i in settings.items if i.allocation is not None}
    why: list[str] = []
    if settings.allocator is None or not allocations:
        builder = f"{call.builder_name} {call.builder_version}".strip() or "an unnamed builder"
        why.append(f"the manifest does not record the allocator's settings (built by {builder}): each item's "
                   "policy is assumed from its action and kind, floors are taken as 0 and priorities as unaged")
        return Fidelity(False, "priority", "ctxkit", {}, why)
    name = settings.allocator.estimator
    if estimator_by_name(name) is None:
        why.append(f"the call counted tokens with {name}, which the server cannot run: cuts at other grants are "
                   "modelled with ctxkit's default estimator (the grants at the call's own budget stay exact)")
    return Fidelity(True, settings.allocator.mode, name, allocations, why, settings.allocator.held_back)


def _counter(base: Estimator, unit: int, known: dict[str, int]) -> Estimator:
    """``base``, except that a rebuilt segment counts as its recorded requested tokens (``known``)
    and each filler character as ``unit`` tokens."""

    def estimate(text: str) -> int:
        tokens = known.get(text)
        if tokens is not None:
            return tokens
        fill = text.count(FILL)
        if not fill:
            return base(text)
        return fill * unit + base(text.replace(FILL, ""))

    return estimate


def _filler(tokens: int, unit: int) -> str:
    """Lines of FILL characters standing for ``tokens`` tokens (so line-based operators can keep
    part of it); at least one character, so the segment is not empty."""
    n = max(1, tokens // unit)
    lines = [FILL * FILL_PER_LINE] * (n // FILL_PER_LINE)
    if n % FILL_PER_LINE:
        lines.append(FILL * (n % FILL_PER_LINE))
    return "\n".join(lines)


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


def _segments(
    items: list[Item], fid: Fidelity, base: Estimator
) -> tuple[list[Segment], dict[str, int], Estimator, int, dict[str, str | None], set[str]]:
    """The allocator's segments rebuilt from the items; their aging; the estimator that counts
    them as recorded; the filler unit; the sent texts; the items whose whole text was sent."""
    parts = {i.item_id: _parts(i) for i in items}
    sent_tokens = {name: base("\n\n".join(p for p in ps if p)) for name, ps in parts.items()}
    missing = {i.item_id: max(0, i.requested_tokens - sent_tokens[i.item_id]) for i in items}
    unit = max(1, math.ceil(sum(missing.values()) / MAX_FILL_CHARS))
    known: dict[str, int] = {}
    segments, aging = [], {}
    for i in items:
        text = _source_text(parts[i.item_id], missing[i.item_id], unit)
        while text in known and known[text] != i.requested_tokens:  # another item's text, another size
            text += FILL
        if text:
            known[text] = i.requested_tokens
        alloc = fid.allocations.get(i.item_id)
        if alloc is not None and alloc.effective_priority is not None:
            aging[i.item_id] = max(0, alloc.effective_priority - i.priority)
        segments.append(Segment(
            name=i.item_id,
            kind=i.kind if is_item_kind(i.kind) else "other",  # stored rows passed the manifest's check
            text=text,
            priority=i.priority,
            policy=alloc.policy if alloc is not None else assumed_policy(i),
            min_tokens=alloc.min_tokens if alloc is not None else 0,
            trust="untrusted" if i.trust == "untrusted" else "trusted",
            source_ref=i.source_ref,
            zone=_ZONES.get(i.zone or ""),
            dedupe=False,  # the stored request is already after the agent's lossless steps
        ))
    texts = {i.item_id: i.text for i in items}
    whole = {name for name, n in missing.items() if n == 0 and texts.get(name)}
    return segments, aging, _counter(base, unit, known), unit, texts, whole


def _run(segments: list[Segment], aging: dict[str, int], estimate: Estimator, params: Params, fid: Fidelity,
         recorded: dict[str, Item]) -> tuple[Plan, set[str]]:
    """Allocate the segments under ``params``; where a grant equals the recorded one the cut is
    the recorded one (see the module notes), and whole items say whether lossless steps ran.
    Also returns the names of the items whose cut is the recorded one."""
    # What the agent held back from the allocation (its blocks, restated constraints) is held back
    # again: at the call's own budget the allocator then sees the cap it saw.
    plan = allocate(segments, budget=params.budget, reserve=params.reserve,
                    safety_margin=params.safety_margin + fid.held_back, estimate=estimate, naive=fid.mode == "naive",
                    aging=aging, aging_step=1,
                    dedupe_across=False)  # the stored candidates are after the agent's dedupe
    if fid.held_back:  # the cap shown is the call's, as in the agent's plan
        plan.safety_margin = params.safety_margin
        plan.cap = figures.input_cap(params.budget, params.reserve, params.safety_margin)
        plan.headroom = figures.headroom(plan.cap, plan.used)
    as_recorded: set[str] = set()
    if not fid.exact:
        return plan, as_recorded
    for a in plan.allocations:
        item = recorded[a.name]
        alloc = fid.allocations[a.name]
        if a.action == "keep" and alloc.lossless:
            a.action = "compress"
        elif 0 < a.granted < a.requested and a.granted == item.granted_tokens and is_action(item.action):
            a.action = item.action
            a.used = item.used_tokens if item.used_tokens is not None else a.granted
            a.text = item.text or ""
            a.reason = f"the cut the agent made at this grant ({a.granted} tokens), as recorded"
            as_recorded.add(a.name)
    plan.used = sum(a.used for a in plan.allocations)
    plan.headroom = figures.headroom(plan.cap, plan.used)
    return plan, as_recorded


def replay(call: Call, items: list[Item], evidence: list[Evidence], params: Params) -> dict[str, Any]:
    """Allocate the call's items again under ``params``; see the module docstring."""
    fid = fidelity(call)
    base = estimator_by_name(fid.estimator) or estimate_tokens
    skipped = [{"id": i.item_id, "action": i.action, "why": SKIPPED_ACTIONS[i.action]}
               for i in items if i.action in SKIPPED_ACTIONS]
    replayable = [i for i in items if i.action not in SKIPPED_ACTIONS]
    if fid.exact:
        skipped += [{"id": i.item_id, "action": i.action, "why": NOT_ALLOCATED}
                    for i in replayable if i.item_id not in fid.allocations]
        replayable = [i for i in replayable if i.item_id in fid.allocations]
    segments, aging, estimate, unit, texts, whole = _segments(replayable, fid, base)
    recorded = {i.item_id: i for i in replayable}
    plan, cut_as_recorded = _run(segments, aging, estimate, params, fid, recorded)
    by_name: dict[str, Allocation] = {a.name: a for a in plan.allocations}
    # The same replay at the call's own budget is the baseline a change is measured against
    # (equal to what the agent did when the replay is exact).
    own = Params(budget=call.window, reserve=call.output_reserve, safety_margin=call.safety_margin)
    base_plan, base_as_recorded = (plan, cut_as_recorded) if own == params else _run(
        segments, aging, estimate, own, fid, recorded)
    base_allocs = {a.name: a for a in base_plan.allocations}

    rows: list[dict[str, Any]] = []
    for i in replayable:
        a = by_name[i.item_id]
        actual_used = figures.context_tokens(i)
        b = base_allocs[i.item_id]
        rows.append({
            "id": i.item_id,
            "label": i.label or "",
            "kind": i.kind,
            "zone": i.zone,
            "trust": i.trust,
            "policy": a.policy,
            "policy_recorded": i.item_id in fid.allocations,
            "requested": i.requested_tokens,
            "actual": {"action": i.action, "granted": i.granted_tokens, "used": actual_used},
            "replay": {"action": a.action, "granted": a.granted, "used": a.used, "reason": a.reason[:300]},
            "baseline": {"action": b.action, "granted": b.granted, "used": b.used},
            "changed": a.action != b.action or a.used != b.used,
        })
    # What the model read, where it is known exactly: a text sent whole, or a recorded cut.
    exact_text = whole | cut_as_recorded
    outputs = plan.outputs()
    ev_rows = [_evidence(e, by_name, texts, outputs, exact_text) for e in evidence]
    base_outputs = base_plan.outputs()
    base_exact = whole | base_as_recorded
    for row, e in zip(ev_rows, evidence, strict=True):
        row["baseline"] = _evidence(e, base_allocs, texts, base_outputs, base_exact)["replay"]
    same = sum(1 for r in rows if r["baseline"]["action"] == r["actual"]["action"])
    in_context = [a for a in plan.allocations if a.used > 0]
    # Headroom has one meaning (ctxkit.figures.headroom): input cap − input read. The replay's
    # input read is its allocation plus what it leaves as it was and is still sent (items it
    # does not allocate, and what the provider counted beyond the items: the question, framing),
    # so at the call's own budget an exact replay gives the call's own headroom.
    actual_read = figures.input_read(call.input_tokens, figures.total_context_tokens(items))
    left_as_it_was = actual_read - figures.total_context_tokens(replayable)
    read = plan.used + left_as_it_was
    return {
        "call_id": call.call_id,
        "params": {"budget": params.budget, "reserve": params.reserve, "safety_margin": params.safety_margin},
        "actual": {"budget": call.window, "reserve": call.output_reserve, "safety_margin": call.safety_margin,
                   "cap": call.input_cap, "input_read": actual_read,
                   "headroom": figures.headroom(call.input_cap, actual_read)},
        "fidelity": fid.to_dict(),
        "cap": plan.cap,
        "used": plan.used,
        "input_read": read,
        "headroom": figures.headroom(plan.cap, read),
        "over_budget": plan.over_budget,
        "warnings": plan.warnings,
        "items": rows,
        "evidence": ev_rows,
        "skipped": skipped,
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
              whole: set[str]) -> dict[str, Any]:
    """Would this evidence reach the model in the replay? Read back literally where the
    carrier's text is known; otherwise judged by how much of the carrier survives."""
    carrier = e.found_in or e.expected_item
    row = {"key": e.key, "label": e.label, "carrier": carrier, "actual": e.present}
    a = allocs.get(carrier) if carrier else None
    if a is None:
        return {**row, "replay": "present" if e.present else "missing",
                "why": "no carrier item to replay; unchanged"}
    if e.literal and carrier and texts.get(carrier):
        found = read_back([KeyField(e.label or e.key, e.literal, carrier, key=e.key)], outputs)[0]
        if found.present:
            return {**row, "replay": "present", "why": f"literal read back in {found.found_in}"}
        if carrier in whole:  # what the model read is known: not finding the literal is final
            return {**row, "replay": "missing",
                    "why": f"literal not in the replayed context; {carrier}: {a.action}, {a.used}/{a.requested} tokens"}
    if a.used <= 0:
        return {**row, "replay": "missing", "why": f"{carrier} would be {a.action}"}
    if a.used >= a.requested:
        return {**row, "replay": "present",
                "why": f"{carrier} would be kept whole ({a.used} tokens)"}
    return {**row, "replay": "at risk",
            "why": f"{carrier} cut to {a.used}/{a.requested} tokens ({a.action}); the part not sent is unknown"}
