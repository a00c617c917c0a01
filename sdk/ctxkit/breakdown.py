"""The context window by category, as an agent's own tool shows it (Claude Code's ``/context``):
system prompt, built-in tools, MCP tools, memory files, messages, tool results, and free space.

One definition beside ``ctxkit.figures``, built on its figures: an item counts with its tokens in
context (:func:`ctxkit.figures.context_tokens`: an item that did not reach the model counts 0),
and free space is the window less the input read (:func:`ctxkit.figures.input_read`: the
provider's input tokens when it reported any, else the tokens in context). What the provider
counted beyond the items (message framing, text the manifest does not itemise, the estimator's
error) is its own segment, ``unitemized``, so the segments add up to what the model read.
docs/analysis.md ("Window breakdown") states it in words; the server reads the same categories
in SQL (manifests/figures.py ``mcp_tool``) and puts them through :func:`from_totals`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ctxkit import agents
from ctxkit.figures import ItemLike, context_tokens, headroom, in_context, input_read, window_utilization

__all__ = [
    "CATEGORIES", "LABELS", "MCP_MARK", "SEGMENTS", "WindowBreakdown", "category_of", "from_totals",
    "is_mcp_tool", "item_category", "summed", "window_breakdown",
]

# The categories of the items, in the order of a context (the bar's order, left to right).
CATEGORIES: tuple[str, ...] = ("system", "tools", "mcp_tools", "memory", "messages", "tool_results")
# The bar's segments: the categories, what was read beyond the items, and the free space.
SEGMENTS: tuple[str, ...] = (*CATEGORIES, "unitemized", "free")
LABELS: dict[str, str] = {
    "system": "System prompt", "tools": "Built-in tools", "mcp_tools": "MCP tools", "memory": "Memory files",
    "messages": "Messages", "tool_results": "Tool results", "unitemized": "Not itemised", "free": "Free space",
}
# Item kinds outside "messages": everything else (task, user, history, summary, retrieval, ...)
# is conversation the agent carries.
_KIND_CATEGORY: dict[str, str] = {"system": "system", "tools": "tools", "memory": "memory",
                                  "tool_result": "tool_results"}
# A tool definition is an MCP tool when the text the mapping records for it (canonical JSON,
# compact) holds the agent's MCP naming (ctxkit.agents.MCP_MARK), whatever the provider's shape.
MCP_MARK = agents.MCP_MARK


class CategorizedItem(ItemLike, Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def text(self) -> str | None: ...


def is_mcp_tool(text: str | None) -> bool:
    """Is this tool definition's text an MCP server's tool? (A definition recorded without its
    text counts as built-in.)"""
    return text is not None and MCP_MARK in text


def category_of(kind: str, mcp: bool = False) -> str:
    """The category of an item of ``kind``; ``mcp``: the item is an MCP tool definition."""
    if kind == "tools" and mcp:
        return "mcp_tools"
    return _KIND_CATEGORY.get(kind, "messages")


def item_category(item: CategorizedItem) -> str:
    """The category of one manifest item (or a stored item row)."""
    return category_of(item.kind, item.kind == "tools" and is_mcp_tool(item.text))


@dataclass(frozen=True)
class WindowBreakdown:
    """One call's window (or a step's calls, :func:`summed`) by category, in tokens.

    ``tokens``: tokens in context per category (every category present, 0 when empty);
    ``items``: items in context per category (``items["tools"]``, ``items["mcp_tools"]``: the
    tool counts); ``input_read``: :func:`ctxkit.figures.input_read`; ``unitemized``: the input
    read beyond the items' tokens (0 when the items count more); ``free``: the window less the
    input read, never below 0."""

    window: int
    input_read: int
    tokens: dict[str, int]
    items: dict[str, int]
    unitemized: int
    free: int
    calls: int = 1
    over: int = 0  # input read beyond the window

    @property
    def counted(self) -> int:
        """Tokens in context of the items (the sum over the categories)."""
        return sum(self.tokens.values())

    @property
    def utilization(self) -> float:
        """:func:`ctxkit.figures.window_utilization` of the input read."""
        return window_utilization(self.input_read, self.window)

    def segment(self, name: str) -> int:
        """Tokens of one of :data:`SEGMENTS`."""
        if name == "unitemized":
            return self.unitemized
        if name == "free":
            return self.free
        return self.tokens.get(name, 0)

    def share(self, name: str) -> float:
        """A segment's share of the window."""
        return self.segment(name) / max(1, self.window)

    @property
    def scale(self) -> int:
        """The bar's full length: the window, or the segments' sum when the items were
        estimated above what the provider reported, or the input read is over the window."""
        return max(self.window, sum(self.segment(s) for s in SEGMENTS))


def from_totals(rows: Iterable[tuple[str, int, int]], *, window: int, input_tokens: int) -> WindowBreakdown:
    """The breakdown from ``(category, tokens in context, items in context)`` rows (a category
    may repeat: its rows add up), the call's window and the provider's input tokens (0: not
    reported)."""
    tokens = dict.fromkeys(CATEGORIES, 0)
    items = dict.fromkeys(CATEGORIES, 0)
    for category, n_tokens, n_items in rows:
        tokens[category] += n_tokens
        items[category] += n_items
    counted = sum(tokens.values())
    read = input_read(input_tokens, counted)
    room = headroom(window, read)  # headroom against the whole window, not the input cap
    return WindowBreakdown(window=window, input_read=read, tokens=tokens, items=items,
                           unitemized=max(0, read - counted), free=max(0, room), over=max(0, -room))


def window_breakdown(items: Iterable[CategorizedItem], window: int, input_tokens: int) -> WindowBreakdown:
    """One call's breakdown from its items (manifest items or stored rows with the same
    field names), its window (``budget.window``) and the provider's input tokens."""
    return from_totals(((item_category(i), context_tokens(i), 1 if in_context(i) else 0) for i in items),
                       window=window, input_tokens=input_tokens)


def summed(breakdowns: Sequence[WindowBreakdown]) -> WindowBreakdown:
    """Several calls' breakdowns added up, segment by segment (the calls of one step)."""
    def total(name: str) -> int:
        return sum(int(getattr(b, name)) for b in breakdowns)
    return WindowBreakdown(
        window=total("window"), input_read=total("input_read"),
        tokens={c: sum(b.tokens[c] for b in breakdowns) for c in CATEGORIES},
        items={c: sum(b.items[c] for b in breakdowns) for c in CATEGORIES},
        unitemized=total("unitemized"), free=total("free"), calls=total("calls"), over=total("over"),
    )
