"""The window by category (ctxkit.breakdown): the call view's panel and the run view's bars
per step. The categories, their order and their words come from ctxkit; their colours from
the stylesheet (``--win-<segment>``), shared by the panel's bar and the run's chart."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ctxkit.breakdown import LABELS, SEGMENTS, WindowBreakdown, summed, window_breakdown
from manifests.models import Call
from manifests.selectors.calls import ItemRow

# The categories whose "count" column holds how many tool definitions they have.
_COUNTED = ("tools", "mcp_tools")


def panel(b: WindowBreakdown) -> dict[str, Any]:
    """The panel's data: every segment with its tokens, share of the window and width on the
    bar (a share of :attr:`WindowBreakdown.scale`), and the tool counts."""
    scale = max(1, b.scale)
    segments = [{
        "key": s, "label": LABELS[s], "tokens": b.segment(s), "share": f"{b.share(s):.1%}",
        "width": f"{100 * b.segment(s) / scale:.3f}", "count": b.items[s] if s in _COUNTED else None,
    } for s in SEGMENTS]
    shown = [s for s in segments if s["tokens"]]
    return {
        "window": b.window, "input_read": b.input_read, "counted": b.counted, "over": b.over,
        "utilization": f"{b.utilization:.1%}", "segments": segments, "shown": shown,
        "builtin_tools": b.items["tools"], "mcp_tools": b.items["mcp_tools"],
        "summary": "; ".join(f"{s['label']} {s['tokens']} tokens ({s['share']})" for s in shown),
    }


def call_window(call: Call, items: Sequence[ItemRow]) -> dict[str, Any] | None:
    """The call view's window panel; None for a call without items. ``memory_files``: where
    the memory items that reached the model came from (their ``source_ref``)."""
    if not items:
        return None
    out = panel(window_breakdown(items, call.window, call.input_tokens))
    out["memory_files"] = [i.source_ref for i in items if i.kind == "memory" and i.in_context and i.source_ref]
    return out


def per_step(rows: Iterable[tuple[int, str, WindowBreakdown]]) -> dict[str, Any]:
    """The run view's chart data from ``(step, call url, breakdown)`` per call, in step order:
    one bar per step, the breakdowns of a step's calls added up (ctxkit.breakdown.summed),
    linked to the step's first call."""
    steps: dict[int, tuple[str, list[WindowBreakdown]]] = {}
    for step, url, b in rows:
        steps.setdefault(step, (url, []))[1].append(b)
    totals = {step: summed(bs) for step, (_, bs) in steps.items()}
    return {
        "steps": list(steps),
        "urls": [url for url, _ in steps.values()],
        "order": list(SEGMENTS),
        "labels": LABELS,
        "segments": {s: [totals[step].segment(s) for step in steps] for s in SEGMENTS},
        "calls": [totals[step].calls for step in steps],
        "tools": [totals[step].items["tools"] for step in steps],
        "mcp_tools": [totals[step].items["mcp_tools"] for step in steps],
    }
