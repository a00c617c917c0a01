"""Compactions an agent does itself, seen from the calls of its run.

An agent that compacts (Claude Code's ``/compact`` or its automatic compaction on a full
window, an SDK's own summariser, a provider's compaction block sent back) first sends a call
that asks for the summary (recorded like any call), then continues with a history that is
shorter than before and opens with the summary. The proxy sees only the calls, so a call is a
compaction when, in the same run:

- its history (``messages`` / ``input``) is shorter than the previous call's, and
- its first user message holds a summary: an item of kind ``summary`` in its manifest (Claude
  Code's summary opening, a generic ``Summary:`` opening, Anthropic's ``compaction`` block,
  OpenAI's ``compaction`` item; see ctxkit.record.summaries).

The :class:`~ctxkit.manifest.Compaction` goes on that call: ``tokens_before`` is the
previous call's input tokens (normalised usage, else the sum of its items' tokens),
``tokens_after`` this call's, ``kept_turns`` the user turns kept after the summary message
(the prompt just added is not one), ``trigger`` ``manual`` / ``auto`` when readable, and the
``required_evidence`` invariant (ctxkit.context.compaction's survival checks) over the evidence
the run declared (``X-Ctxview-Evidence``) and the previous call sent: a literal this call does
not send is lost, named by its evidence key (none held before: no invariant). A previous call that already recorded a
compaction of its own (a provider's, from its usage) is not counted twice.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ctxkit.context.compaction import survival_checks
from ctxkit.manifest import MAX_EVIDENCE, MAX_NAME, MAX_REASON, Compaction, Invariant, Manifest
from ctxkit.proxy.runs import conversation_of
from ctxkit.record.summaries import summary_strategy, summary_trigger

__all__ = ["CompactionWatch"]


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the next call of the run is compared with."""

    messages: int
    tokens: int
    compacted: bool
    present: tuple[str, ...]  # literals of declared evidence this call sent


def _tokens(manifest: Manifest) -> int:
    if manifest.usage.input_tokens:
        return manifest.usage.input_tokens
    return sum(item.requested_tokens for item in manifest.items)


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text(blocks: list[dict[str, Any]]) -> str:
    return "\n".join(str(b.get("text", "")) for b in blocks if isinstance(b.get("text"), str))


def _summary_at(history: list[Any]) -> tuple[int, str, str]:
    """(index of the message holding the summary, strategy, trigger); index -1 when the first
    user message holds none."""
    for index, entry in enumerate(history):
        if not isinstance(entry, dict):
            continue
        if entry.get("type") == "compaction":  # OpenAI Responses' compaction item
            return index, "openai_compaction", "provider"
        if entry.get("role") != "user":
            continue
        blocks = _blocks(entry.get("content"))
        if any(b.get("type") == "compaction" for b in blocks):
            return index, "anthropic_compaction", "provider"
        for block in blocks:
            strategy = summary_strategy(str(block.get("text", ""))) if block.get("type", "text") in (
                "text", "input_text") else ""
            if strategy:  # Claude Code's /compact command may sit in any later user message
                later = "\n".join(_text(_blocks(e.get("content"))) for e in history[index:]
                                  if isinstance(e, dict) and e.get("role") == "user")
                return index, strategy, summary_trigger(later)
        return -1, "", ""
    return -1, "", ""


def _says_something(entry: Any) -> bool:
    """A user message with text (not only tool results)."""
    return isinstance(entry, dict) and entry.get("role") == "user" and any(
        b.get("type", "text") in ("text", "input_text") for b in _blocks(entry.get("content")))


def _kept_turns(after_summary: list[Any]) -> int:
    """The user turns kept verbatim after the summary: its user messages with text, but for the
    last user message when that is the prompt the agent just added (not a tool result)."""
    users = [entry for entry in after_summary if isinstance(entry, dict) and entry.get("role") == "user"]
    turns = sum(1 for entry in users if _says_something(entry))
    return turns - 1 if users and _says_something(users[-1]) else turns


class CompactionWatch:
    """Remembers the last call of each run (bounded, least recently used out first) and tells
    whether the next one is a compaction; used from the proxy's one builder thread (and locked)."""

    def __init__(self, *, max_runs: int = 10_000) -> None:
        self.max_runs = max_runs
        self._last: OrderedDict[str, _Seen] = OrderedDict()
        self._lock = threading.Lock()

    def observe(self, api: str, request: dict[str, Any], manifest: Manifest) -> Compaction | None:
        """Remember ``manifest`` as its run's last call; the compaction it shows, if any."""
        history = conversation_of(api, request)
        declared = {e.literal: e.key for e in manifest.evidence if e.literal}
        present = tuple(e.literal for e in manifest.evidence if e.literal and e.present)
        seen = _Seen(messages=len(history), tokens=_tokens(manifest), compacted=bool(manifest.compactions),
                     present=present)
        with self._lock:
            previous = self._last.pop(manifest.run_id, None)
            self._last[manifest.run_id] = seen
            while len(self._last) > self.max_runs:
                self._last.popitem(last=False)
        if previous is None or previous.compacted or manifest.compactions or seen.messages >= previous.messages:
            return None
        summary = next((item for item in manifest.items if item.kind == "summary"), None)
        at, strategy, trigger = _summary_at(history)
        if summary is None or at < 0:
            return None
        invariants = []
        # Only what the previous call sent can be lost by the compaction.
        held = [literal for literal in declared if literal in previous.present]
        if held:
            check = next(c for c in survival_checks(before="\n".join(previous.present), after="\n".join(present),
                                                    required_evidence=held)
                         if c.name == "required_evidence")
            lost = [declared[literal][:MAX_NAME] for literal in check.lost][:MAX_EVIDENCE]
            invariants.append(Invariant(name="required_evidence", ok=check.ok, detail=check.detail[:MAX_REASON],
                                        lost=lost))
        digest = hashlib.sha256(f"{manifest.run_id}\x1f{manifest.step}".encode()).hexdigest()[:16]
        return Compaction(id=f"compaction-{digest}", strategy=strategy, tokens_before=previous.tokens,
                          tokens_after=seen.tokens, trigger=trigger, kept_turns=_kept_turns(history[at + 1:]),
                          summary_item=summary.id, invariants=invariants)
