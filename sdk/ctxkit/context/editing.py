"""Context editing beyond tool results: clearing old thinking blocks.

Context editing deletes stale tool results and thinking blocks from the projection, without a summary.
:func:`clear_thinking` does for the model's old thinking blocks what
:func:`ctxkit.context.compaction.clear_tool_results` does for old tool results: every thinking
record but those of the last ``keep_last`` turns is replaced by a short placeholder (it keeps a
ref and the token count, so the manifest can say what was freed), nothing is summarized, the
caller's records are untouched, and the result is a ``ClearResult`` whose ``to_manifest()`` is a
context edit of type ``clear_thinking`` (Anthropic's name for the same edit). Thinking records
are ``Record(kind="thinking", role="assistant", ...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ctxkit.context.compaction import ClearResult, Record, placeholder
from ctxkit.context.tokens import Estimate, resolve_estimate

THINKING = "thinking"


def clear_thinking(records: Sequence[Record], *, keep_last: int = 1, clear_at_least: int = 0,
                   estimate: Estimate | None = None) -> ClearResult:
    """Replace every live thinking block but those of the last ``keep_last`` turns by a placeholder.

    A turn is the record's ``turn`` when set, else each thinking record is its own turn. Like
    clearing tool results it changes the middle of the sequence (the cache after it is
    rewritten), so nothing changes unless it frees at least ``clear_at_least`` tokens.
    """
    if keep_last < 0 or clear_at_least < 0:
        raise ValueError("keep_last and clear_at_least must be >= 0")
    estimate = resolve_estimate(estimate)
    records = list(records)
    thinking = [i for i, r in enumerate(records) if r.kind == THINKING and r.live and not r.cleared]
    turns = list(dict.fromkeys(records[i].turn if records[i].turn is not None else ("own", i) for i in thinking))
    kept_turns = set(turns[len(turns) - keep_last:]) if keep_last else set()
    replaced: dict[int, Record] = {}
    freed = 0
    for i in thinking:
        r = records[i]
        if (r.turn if r.turn is not None else ("own", i)) in kept_turns:
            continue
        original = estimate(r.text)
        text = placeholder(r, original).replace("cleared tool result", "cleared thinking block")
        saved = original - estimate(text)
        if saved <= 0:
            continue
        replaced[i] = replace(r, text=text, cleared=True)
        freed += saved
    if not replaced or freed < clear_at_least:
        reason = f"would free {freed} tokens, below clear_at_least={clear_at_least}" if replaced else "nothing to clear"
        return ClearResult(applied=False, records=records, cleared_ids=[], cleared_tokens=0, kept=len(thinking),
                           reason=reason, edit_type="clear_thinking")
    cleared_ids = [records[i].id for i in sorted(replaced)]
    return ClearResult(
        applied=True,
        records=[replaced.get(i, r) for i, r in enumerate(records)],
        cleared_ids=cleared_ids,
        cleared_tokens=freed,
        kept=len(thinking) - len(replaced),
        reason=f"cleared {len(cleared_ids)} thinking blocks, freed {freed} tokens",
        edit_type="clear_thinking",
    )
