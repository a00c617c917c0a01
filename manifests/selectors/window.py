"""The window by category (ctxkit.breakdown): the call view's panel, the API's
``window_breakdown`` of a call (the same rows and numbers, from one function) and the run view's
bars per step. The categories, their order and their words come from ctxkit; their colours from
the stylesheet (``--win-<segment>``), shared by the panel's bar and the run's chart."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ctxkit.breakdown import LABELS, SEGMENTS, CategorizedItem, WindowBreakdown, summed, window_breakdown
from ctxkit.figures import in_context
from manifests.models import Call

# The categories whose "count" column holds how many tool definitions they have.
_COUNTED = ("tools", "mcp_tools")


def rows(b: WindowBreakdown) -> list[dict[str, Any]]:
    """One row per segment, in the bar's order: its category, label, tokens, share of the window
    (0..1) and, for the tool categories, how many definitions. The panel's table and the API's
    ``window_breakdown`` are both these rows."""
    return [{"category": s, "label": LABELS[s], "tokens": b.segment(s), "share": b.share(s),
             "count": b.items[s] if s in _COUNTED else None} for s in SEGMENTS]


def panel(b: WindowBreakdown) -> dict[str, Any]:
    """The panel's data: every segment with its tokens, share of the window and width on the
    bar (a share of :attr:`WindowBreakdown.scale`), and the tool counts."""
    scale = max(1, b.scale)
    segments = [{
        "key": r["category"], "label": r["label"], "tokens": r["tokens"], "share": f"{r['share']:.1%}",
        "width": f"{100 * r['tokens'] / scale:.3f}", "count": r["count"],
    } for r in rows(b)]
    shown = [s for s in segments if s["tokens"]]
    return {
        "window": b.window, "input_read": b.input_read, "counted": b.counted, "over": b.over,
        "utilization": f"{b.utilization:.1%}", "segments": segments, "shown": shown,
        "builtin_tools": b.items["tools"], "mcp_tools": b.items["mcp_tools"],
        "summary": "; ".join(f"{s['label']} {s['tokens']} tokens ({s['share']})" for s in shown),
    }


class _Item(CategorizedItem, Protocol):
    """An item of the call view (``ItemRow``) or a stored ``Item``: what the panel reads."""

    @property
    def source_ref(self) -> str | None: ...


def _memory_files(items: Sequence[_Item]) -> list[str]:
    """Where the memory items that reached the model came from (their ``source_ref``)."""
    return [i.source_ref for i in items if i.kind == "memory" and i.source_ref and in_context(i)]


def call_window(call: Call, items: Sequence[_Item]) -> dict[str, Any] | None:
    """The call view's window panel; None for a call without items."""
    if not items:
        return None
    out = panel(window_breakdown(items, call.window, call.input_tokens))
    out["memory_files"] = _memory_files(items)
    return out


def call_breakdown(call: Call, items: Sequence[_Item]) -> dict[str, Any] | None:
    """The API's ``window_breakdown`` of a call: the panel's figures as numbers (shares and
    utilisation as fractions of the window); None for a call without items, as the page shows
    no panel then."""
    if not items:
        return None
    b = window_breakdown(items, call.window, call.input_tokens)
    return {"window": b.window, "input_read": b.input_read, "counted": b.counted, "over": b.over,
            "utilization": b.utilization, "categories": rows(b), "builtin_tools": b.items["tools"],
            "mcp_tools": b.items["mcp_tools"], "memory_files": _memory_files(items)}


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
