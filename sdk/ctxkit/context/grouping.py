"""Atomic interaction groups and budgeted projection of a message history.

API notes
---------
- ``group_interactions(history, *, estimate=estimate_tokens) -> list[Group]``: split a linear
  history (a list of message dicts) into atomic groups. A group starts at each real user
  message (one that is not only carrying tool results) and holds everything it triggered:
  assistant messages with tool calls, their tool results, the final assistant answer.
  Messages before the first user message form a ``preamble`` group. Understood shapes:
  OpenAI chat (``assistant.tool_calls[].id`` / ``{"role": "tool", "tool_call_id"}``) and
  Anthropic (``tool_use`` blocks with ``id`` / ``tool_result`` blocks with ``tool_use_id``
  inside a user message). A result that arrives after a later user message (an async tool
  finishing late) merges every group from its call to it, so a call and its result are
  never in different groups.
- ``project(history, *, window, system_tokens=0, output_reserve=0, safety_margin=0,
  estimate=estimate_tokens) -> Projection``: keep whole groups newest to oldest while they fit
  ``window - system_tokens - output_reserve - safety_margin``; stop at the first that does
  not (older groups are dropped: recency is relevance). If the newest group alone exceeds
  the budget it is kept whole and ``overflow_tokens`` says by how much: half a group (a call
  without its result) is worse than a group slightly over.
- ``message_tokens(message, estimate, overhead=None)``: the caller's count when the message
  carries one (an int ``"tokens"`` key), verbatim; else ``estimate`` of its text (content, tool
  call names and arguments, tool results) plus the framing overhead. The estimator
  is the caller's, so the overhead is ``MESSAGE_OVERHEAD`` (4) only with ctxkit's own default
  estimator and 0 when the caller passes ``estimate=`` (``overhead=`` sets it explicitly);
  ``group_interactions`` and ``project`` take the same ``overhead=``.
- ``Projection``: ``messages`` (kept, original order), ``kept_group_ids``, ``dropped_group_ids``,
  ``groups``, ``budget``, ``used_tokens``, ``overflow_tokens``, ``dangling_call_ids`` and
  ``orphan_result_ids`` (pairing problems already present in the input; never created here).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxkit import figures
from ctxkit.context.tokens import Estimator, estimate_tokens

Message = Mapping[str, Any]
MESSAGE_OVERHEAD = 4  # role and framing tokens per message, as chat formats add them


@dataclass(slots=True)
class Group:
    id: str
    kind: str  # "interaction" | "preamble"
    start: int  # index of the first message in the history
    messages: list[Message]
    tokens: int
    call_ids: list[str] = field(default_factory=list)
    result_ids: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every call has its result and every result its call, inside the group."""
        return set(self.call_ids) == set(self.result_ids)


@dataclass(slots=True)
class Projection:
    messages: list[Message]
    kept_group_ids: list[str]
    dropped_group_ids: list[str]
    groups: list[Group]
    budget: int
    used_tokens: int
    overflow_tokens: int
    dangling_call_ids: list[str]
    orphan_result_ids: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kept_group_ids": list(self.kept_group_ids),
            "dropped_group_ids": list(self.dropped_group_ids),
            "budget": self.budget,
            "used_tokens": self.used_tokens,
            "overflow_tokens": self.overflow_tokens,
            "dangling_call_ids": list(self.dangling_call_ids),
            "orphan_result_ids": list(self.orphan_result_ids),
            "groups": [
                {"id": g.id, "kind": g.kind, "start": g.start, "size": len(g.messages), "tokens": g.tokens}
                for g in self.groups
            ],
        }


# --------------------------------------------------------------------------- #
# Reading messages


def _blocks(message: Message) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if isinstance(content, list):
        return [b for b in content if isinstance(b, Mapping)]
    return []


def tool_call_ids(message: Message) -> list[str]:
    """Ids of the tool calls a message makes (OpenAI ``tool_calls``, Anthropic ``*tool_use`` blocks)."""
    ids = [str(c["id"]) for c in message.get("tool_calls") or () if isinstance(c, Mapping) and "id" in c]
    ids += [str(b["id"]) for b in _blocks(message) if str(b.get("type", "")).endswith("tool_use") and "id" in b]
    return ids


def tool_result_ids(message: Message) -> list[str]:
    """Ids of the calls a message answers (OpenAI ``role=tool``, Anthropic ``tool_result`` blocks)."""
    ids = [str(message["tool_call_id"])] if message.get("role") == "tool" and "tool_call_id" in message else []
    ids += [
        str(b["tool_use_id"])
        for b in _blocks(message)
        if str(b.get("type", "")).endswith("tool_result") and "tool_use_id" in b
    ]
    return ids


def _starts_interaction(message: Message) -> bool:
    # An Anthropic user message that carries tool results continues the current group.
    return message.get("role") == "user" and not tool_result_ids(message)


def _flatten(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_flatten(v) for v in value)
    if isinstance(value, Mapping):
        if "text" in value and isinstance(value["text"], str):
            return value["text"]
        parts = [str(value.get("name", ""))]
        for key in ("input", "arguments", "content", "function"):
            if key not in value:
                continue
            inner = value[key]
            if isinstance(inner, str):
                parts.append(inner)
            elif key == "content":
                parts.append(_flatten(inner))
            else:
                parts.append(json.dumps(inner, ensure_ascii=False, sort_keys=True))
        return "\n".join(p for p in parts if p)
    return "" if value is None else str(value)


def _overhead(estimate: Estimator, overhead: int | None) -> int:
    if overhead is not None:
        if overhead < 0:
            raise ValueError("overhead must be >= 0")
        return overhead
    return MESSAGE_OVERHEAD if estimate is estimate_tokens else 0


def message_tokens(message: Message, estimate: Estimator = estimate_tokens, overhead: int | None = None) -> int:
    given = message.get("tokens")
    if isinstance(given, int) and not isinstance(given, bool) and given >= 0:
        return given  # the caller's own count: never adjusted
    overhead = _overhead(estimate, overhead)
    text = _flatten(message.get("content"))
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            fn = call.get("function") or {}
            text += "\n" + str(fn.get("name", "")) + "\n" + _flatten(fn.get("arguments", ""))
    return estimate(text) + overhead


# --------------------------------------------------------------------------- #
# Grouping and projection


def group_interactions(
    history: Sequence[Message], *, estimate: Estimator = estimate_tokens, overhead: int | None = None
) -> list[Group]:
    """Split ``history`` into atomic interaction groups (see module notes)."""
    overhead = _overhead(estimate, overhead)
    if not history:
        return []
    # 1. provisional boundaries at real user messages
    starts = [0] + [i for i in range(1, len(history)) if _starts_interaction(history[i])]
    owner = [0] * len(history)
    for g, s in enumerate(starts):
        end = starts[g + 1] if g + 1 < len(starts) else len(history)
        for i in range(s, end):
            owner[i] = g
    # 2. a call and its result in different provisional groups join them and everything between
    call_group: dict[str, int] = {}
    result_group: dict[str, int] = {}
    for i, m in enumerate(history):
        for cid in tool_call_ids(m):
            call_group.setdefault(cid, owner[i])
        for rid in tool_result_ids(m):
            result_group.setdefault(rid, owner[i])
    reach = list(range(len(starts)))  # reach[g]: last provisional group that g must merge with
    for cid, cg in call_group.items():
        rg = result_group.get(cid)
        if rg is not None and rg != cg:
            lo, hi = min(cg, rg), max(cg, rg)
            reach[lo] = max(reach[lo], hi)
    groups: list[Group] = []
    g = 0
    while g < len(starts):
        hi = reach[g]
        k = g
        while k <= hi:  # a merged range may itself reach further
            hi = max(hi, reach[k])
            k += 1
        s = starts[g]
        end = starts[hi + 1] if hi + 1 < len(starts) else len(history)
        msgs = list(history[s:end])
        preamble = s == 0 and not _starts_interaction(history[0])
        groups.append(
            Group(
                id=f"g{s}",
                kind="preamble" if preamble and hi == g == 0 else "interaction",
                start=s,
                messages=msgs,
                tokens=sum(message_tokens(m, estimate, overhead) for m in msgs),
                call_ids=[c for m in msgs for c in tool_call_ids(m)],
                result_ids=[r for m in msgs for r in tool_result_ids(m)],
            )
        )
        g = hi + 1
    return groups


def project(
    history: Sequence[Message],
    *,
    window: int,
    system_tokens: int = 0,
    output_reserve: int = 0,
    safety_margin: int = 0,
    estimate: Estimator = estimate_tokens,
    overhead: int | None = None,
) -> Projection:
    """Keep whole groups, newest first, within the history budget (see module notes)."""
    budget = max(0, figures.input_cap(window, output_reserve, safety_margin) - system_tokens)
    groups = group_interactions(history, estimate=estimate, overhead=overhead)
    kept: list[Group] = []
    used = 0
    for group in reversed(groups):
        if used + group.tokens <= budget:
            kept.append(group)
            used += group.tokens
        elif not kept:  # the newest group alone is over: keep it whole, report the overflow
            kept.append(group)
            used += group.tokens
        else:
            break
    kept.reverse()
    kept_ids = {g.id for g in kept}
    calls = {c for g in kept for c in g.call_ids}
    results = {r for g in kept for r in g.result_ids}
    return Projection(
        messages=[m for g in kept for m in g.messages],
        kept_group_ids=[g.id for g in kept],
        dropped_group_ids=[g.id for g in groups if g.id not in kept_ids],
        groups=groups,
        budget=budget,
        used_tokens=used,
        overflow_tokens=max(0, used - budget),
        dangling_call_ids=sorted(calls - results),
        orphan_result_ids=sorted(results - calls),
    )
