"""What the manifest's numbers mean: each figure defined once.

This is ctxkit's third job, beside building a context (``ctxkit.context``) and recording
it (``ctxkit.record``). The server computes the same figures in SQL
(``manifests/figures.py``), and a test checks the two forms agree on generated data.
Pages, API, rollups, analysis and replay use these definitions; no other module writes
its own formula for them. docs/analysis.md lists each with its meaning.
"""

from __future__ import annotations

from ctxkit.record.manifest import ABSENT_ACTIONS, Item, Usage

__all__ = [
    "ABSENT_ACTIONS", "COST_WEIGHTS", "context_tokens", "cost_units", "hit_rate", "in_context", "uncached_tokens",
]

# Seed 001, 5.1.1: the price of a token relative to one uncached input token.
COST_WEIGHTS: dict[str, float] = {"input": 1.0, "output": 4.0, "cache_read": 0.1, "cache_write": 1.25}


def in_context(item: Item) -> bool:
    """Did anything of the item reach the model? Every action but drop, dedupe and clear
    leaves some of it, whether or not the manifest gave it a position."""
    return item.action not in ABSENT_ACTIONS


def context_tokens(item: Item) -> int:
    """Tokens the item takes in the context the model read: what it used, else what it
    was granted, else what it asked for; 0 when nothing of it reached the model."""
    if not in_context(item):
        return 0
    if item.used_tokens is not None:
        return item.used_tokens
    if item.granted_tokens is not None:
        return item.granted_tokens
    return item.requested_tokens


def hit_rate(cache_read_tokens: int, input_tokens: int) -> float | None:
    """Share of the input read from the provider's prompt cache. ``None`` when there was
    no input: a call (or bucket) that read nothing has no hit rate, and counting it as 0
    would draw a false drop on every trend."""
    if input_tokens <= 0:
        return None
    return cache_read_tokens / input_tokens


def uncached_tokens(usage: Usage) -> int:
    """Input tokens billed at the full rate: input minus cache reads and cache writes
    (usage is in OpenTelemetry's normal form, where input includes both)."""
    return max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)


def cost_units(usage: Usage) -> float:
    """The call's cost in seed 001's relative units (an uncached input token is 1)."""
    w = COST_WEIGHTS
    return (
        uncached_tokens(usage) * w["input"]
        + usage.cache_read_tokens * w["cache_read"]
        + usage.cache_write_tokens * w["cache_write"]
        + usage.output_tokens * w["output"]
    )
