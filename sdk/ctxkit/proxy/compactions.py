"""Compactions an agent does itself, seen from the calls of its run.

An agent that compacts (Claude Code's ``/compact`` or its automatic compaction on a full
window, an SDK's own summariser, a provider's compaction block sent back) first sends a call
that asks for the summary (recorded like any call), then continues with a history that is
shorter than before and opens with the summary. The proxy sees only the calls, so a call is a
compaction when, in the same run:

- its first user message holds a summary (Codex's: a later user message): an item of kind
  ``summary`` in its manifest (an agent's summary opening, ctxkit.agents; a provider's
  compaction block or item), and
- its history (ctxkit.proxy.history) is shorter than the previous call's, or the previous call
  did not open with this summary (a compaction that kept most turns, whose history the new
  prompt and answer bring back to the length it had).

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
from dataclasses import dataclass
from typing import Any

from ctxkit.context.compaction import survival_checks
from ctxkit.manifest import MAX_EVIDENCE, MAX_NAME, MAX_REASON, Compaction, Invariant, Manifest
from ctxkit.proxy.history import History
from ctxkit.proxy.lru import LRU

__all__ = ["CompactionWatch"]


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the next call of the run is compared with."""

    messages: int
    tokens: int
    compacted: bool
    present: tuple[str, ...]  # literals of declared evidence this call sent
    summary: str  # a digest of the summary the call opens with, "" without one


def _tokens(manifest: Manifest) -> int:
    if manifest.usage.input_tokens:
        return manifest.usage.input_tokens
    return sum(item.requested_tokens for item in manifest.items)


class CompactionWatch:
    """Remembers the last call of each run (bounded, least recently used out first) and tells
    whether the next one is a compaction; used from the proxy's one builder thread (and locked)."""

    def __init__(self, *, max_runs: int = 10_000) -> None:
        self.max_runs = max_runs
        self._last: LRU[str, _Seen] = LRU(max_runs)
        self._lock = threading.Lock()

    def observe(self, api: str, request: dict[str, Any], manifest: Manifest,
                history: History | None = None) -> Compaction | None:
        """Remember ``manifest`` as its run's last call; the compaction it shows, if any
        (``history``: the call's, when the caller parsed it already)."""
        history = history if history is not None else History(api, request)
        declared = {e.literal: e.key for e in manifest.evidence if e.literal}
        present = tuple(e.literal for e in manifest.evidence if e.literal and e.present)
        opening = history.summary_text
        seen = _Seen(messages=len(history), tokens=_tokens(manifest), compacted=bool(manifest.compactions),
                     present=present,
                     summary=hashlib.sha256(opening.encode("utf-8", "surrogatepass")).hexdigest() if opening else "")
        with self._lock:
            previous = self._last.pop(manifest.run_id)
            self._last.put(manifest.run_id, seen)
        if previous is None or previous.compacted or manifest.compactions:
            return None
        if seen.messages >= previous.messages and seen.summary in ("", previous.summary):
            return None
        summary = next((item for item in manifest.items if item.kind == "summary"), None)
        found = history.summary
        if summary is None or found is None:
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
        return Compaction(id=f"compaction-{digest}", strategy=found.strategy, tokens_before=previous.tokens,
                          tokens_after=seen.tokens, trigger=found.trigger, kept_turns=history.kept_turns(found.at),
                          summary_item=summary.id, invariants=invariants)
