"""Cost in relative units, per call and per run, and the prompt-cache rules.

One unit is the price of one uncached input token. The weights and the formula are
``ctxkit.figures``'s (:data:`~ctxkit.figures.COST_WEIGHTS`, :func:`~ctxkit.figures.cost_units`), the same the
server uses; this module only adds them up and applies them to the caching questions:

- :func:`cost` -- one call's cost, from a ``Usage``, a ``Manifest`` or a provider's raw usage;
  :func:`cost_usd` -- the same in US dollars at the model's own prices (``ctxkit.models``).
- :func:`run_cost` -- a run's cost: the total and each call's share.
- :func:`cache_saving` / :func:`cache_break_even` -- caching a prefix of P
  tokens over n calls saves (c_in - c_read) P (n - 1) - (c_write - c_in) P; it pays from
  n > 1 + (c_write - c_in) / (c_in - c_read) calls (1.28 with the default weights: the second
  call already gains; 3 with c_write = 2, c_read = 0.5).
- :func:`ttl_expired` -- after a pause longer than the cache TTL the next call
  misses by design; record the TTL in force (``ContextBuilder(cache_ttl_seconds=...)`` or
  ``Manifest.cache_ttl_seconds``) and the server reports such a miss as ``ttl_expired``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ctxkit.figures import COST_WEIGHTS, cost_units
from ctxkit.figures import cost_usd as cost_usd_of
from ctxkit.manifest import Manifest, Usage
from ctxkit.models import model_facts

__all__ = ["RunCost", "cache_break_even", "cache_saving", "cost", "cost_usd", "run_cost", "ttl_expired"]


def _usage(call: Any) -> Usage:
    if isinstance(call, Usage):
        return call
    if isinstance(call, Manifest):
        return call.usage
    from ctxkit.record.usage import normalize_usage

    return normalize_usage(call)


def cost(call: Usage | Manifest | Any) -> float:
    """One call's cost in relative units (:func:`ctxkit.figures.cost_units` of its usage)."""
    return cost_units(_usage(call))


def cost_usd(call: Usage | Manifest | Any, model: str | None = None, *, provider: str | None = None,
             at: datetime | None = None) -> float | None:
    """One call's cost in US dollars (:func:`ctxkit.figures.cost_usd`) at the model's own prices
    in genai-prices' table: a manifest names its model, provider and date; for a usage pass
    ``model`` (and ``at``, else today's prices). None when the table does not know the model."""
    if isinstance(call, Manifest):
        model, provider, at = model or call.model, provider or call.provider, at or call.started_at
    if not model:
        raise ValueError("cost_usd needs the model of a usage (model=)")
    usage = _usage(call)
    facts = model_facts(model, provider)
    return cost_usd_of(usage, facts.prices_at(usage.input_tokens, at) if facts is not None else None)


@dataclass(frozen=True, slots=True)
class RunCost:
    """A run's cost: ``total`` and ``per_call`` in relative units, in the order given."""

    total: float
    per_call: tuple[float, ...]

    @property
    def calls(self) -> int:
        return len(self.per_call)


def run_cost(calls: Iterable[Usage | Manifest | Any]) -> RunCost:
    """The cost of a run's calls (usages, manifests or raw provider usages)."""
    per_call = tuple(cost(c) for c in calls)
    return RunCost(total=sum(per_call), per_call=per_call)


def cache_saving(prefix_tokens: int, calls: int, weights: Mapping[str, float] = COST_WEIGHTS) -> float:
    """Units saved by caching a stable prefix of ``prefix_tokens`` over ``calls`` calls
    (written once, read by the others) against sending it uncached every time; negative
    when caching costs more."""
    if prefix_tokens < 0 or calls < 0:
        raise ValueError("prefix_tokens and calls must be >= 0")
    if calls == 0:
        return 0.0
    c_in, c_read, c_write = weights["input"], weights["cache_read"], weights["cache_write"]
    return (c_in - c_read) * prefix_tokens * (calls - 1) - (c_write - c_in) * prefix_tokens


def cache_break_even(weights: Mapping[str, float] = COST_WEIGHTS) -> float:
    """The n above which caching a prefix pays: 1 + (c_write - c_in) / (c_in - c_read)."""
    c_in, c_read, c_write = weights["input"], weights["cache_read"], weights["cache_write"]
    if c_read >= c_in:
        raise ValueError("a cache read must cost less than an uncached input token to ever pay")
    return 1 + (c_write - c_in) / (c_in - c_read)


def ttl_expired(last_use: datetime, next_start: datetime, ttl_seconds: float) -> bool:
    """Whether the cache written or read at ``last_use`` is gone by ``next_start``: a longer
    pause means the next call pays a full write once, by design."""
    if ttl_seconds <= 0:
        raise ValueError("ttl_seconds must be > 0")
    return (next_start - last_use).total_seconds() > ttl_seconds
