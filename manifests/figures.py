"""The SQL/ORM counterparts of ctxkit.figures: one expression per figure.

Every query that counts tokens in context, hit rate, uncached tokens, cost (relative and USD), the input cap,
the input read, headroom, a share of the window, the saving of a cache miss, a compaction's net saving
or the MCP tools of the window breakdown (ctxkit.breakdown) builds on these, so the database and
Python agree (tests/analysis/test_figures_agree.py checks it on generated data, on PostgreSQL and
SQLite). The field lists of the rollups and of an item live here too, written once.
Callers that write raw SQL (bench/scale_columns.py's ``INSERT ... SELECT`` generator) take
these same expressions as SQL text through :func:`as_sql`, never a hand-written copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.db.models import (
    BigIntegerField,
    BooleanField,
    Case,
    ExpressionWrapper,
    F,
    FloatField,
    Model,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.expressions import Combinable, CombinedExpression
from django.db.models.functions import Cast, Coalesce, Floor, Greatest, Least, StrIndex
from django.db.models.lookups import GreaterThan

from ctxkit.breakdown import MCP_MARK
from ctxkit.figures import ABSENT_ACTIONS, COST_WEIGHTS, MISSING_CAUSES, RISK_CAUSES
from ctxkit.figures import hit_rate as hit_rate_of
from ctxkit.models import UsdPrices

__all__ = [
    "ITEM_FIELDS", "MISSING_CAUSES", "RISK_CAUSES", "ROLLUP_SUM_FIELDS", "as_sql", "cache_saving",
    "cache_write_1h_tokens", "compaction_reread_tokens", "context_tokens", "cost_units", "cost_usd",
    "effective_limit", "effective_share", "headroom", "hit_rate", "hit_rate_of", "in_context", "input_cap",
    "input_read", "mcp_tool", "net_saving", "net_saving_cost", "reserve_share", "tool_share", "uncached_tokens",
    "window_utilization",
]

# The additive columns of a rollup bucket (models.Rollup), summed by day buckets, the
# overview, the cache view and the consistency test.
ROLLUP_SUM_FIELDS = (
    "calls", "items", "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens",
    "uncached_input_tokens", "cost", "cost_usd", "verified_successes", "evidence_total", "evidence_present",
    "compactions", "invariant_failures", "prefix_changes",
)
ROLLUP_MAP_FIELDS = ("attributions", "cache_causes", "tokens_by_kind")

# An item's stored fields, as the call view's diff, the API and replay read them.
ITEM_FIELDS = (
    "item_id", "kind", "action", "trust", "priority", "pinned", "zone", "position", "requested_tokens",
    "granted_tokens", "used_tokens", "reason", "source_ref", "source_version", "content_hash", "group", "text",
    "label",
)


def _f(prefix: str, name: str) -> F:
    return F(f"{prefix}{name}")


def in_context(prefix: str = "") -> Q:
    """ctxkit.figures.in_context: the item's action leaves some of it in the context, and
    its used (else granted) tokens are not recorded as 0."""
    used, granted = f"{prefix}used_tokens", f"{prefix}granted_tokens"
    sent = Q(**{f"{used}__gt": 0}) | Q(**{f"{used}__isnull": True}) & (
        Q(**{f"{granted}__isnull": True}) | Q(**{f"{granted}__gt": 0})
    )
    return ~Q(**{f"{prefix}action__in": sorted(ABSENT_ACTIONS)}) & sent


def context_tokens(prefix: str = "") -> Case:
    """ctxkit.figures.context_tokens: used, else granted, else requested; 0 when absent."""
    return Case(
        When(in_context(prefix), then=Coalesce(_f(prefix, "used_tokens"), _f(prefix, "granted_tokens"),
                                              _f(prefix, "requested_tokens"))),
        default=Value(0),
    )


def mcp_tool(prefix: str = "") -> Case:
    """ctxkit.breakdown's MCP test of an item (``is_mcp_tool`` of a ``tools`` item's text): the
    text holds ``MCP_MARK``, found by position (instr / strpos: case-sensitive on both
    databases, where SQLite's LIKE is not)."""
    # Nested, so that the text is searched only for tool definitions (CASE evaluates in order).
    found = Case(When(GreaterThan(StrIndex(_f(prefix, "text"), Value(MCP_MARK)), 0), then=Value(True)),
                 default=Value(False), output_field=BooleanField())
    return Case(When(Q(**{f"{prefix}kind": "tools"}), then=found), default=Value(False), output_field=BooleanField())


def uncached_tokens(prefix: str = "") -> Greatest:
    """ctxkit.figures.uncached_tokens: input minus cache reads and writes, never below 0."""
    return Greatest(
        Value(0),
        _f(prefix, "input_tokens") - _f(prefix, "cache_read_tokens") - _f(prefix, "cache_write_tokens"),
    )


def hit_rate(cache_read: Combinable, input_tokens: Combinable) -> Case:
    """ctxkit.figures.hit_rate over two (summed) expressions: NULL when there was no input."""
    return Case(
        When(GreaterThan(input_tokens, 0), then=ExpressionWrapper(
            Cast(cache_read, FloatField()) / Cast(input_tokens, FloatField()), output_field=FloatField())),
        default=Value(None, output_field=FloatField()),
        output_field=FloatField(),
    )


def _cost(uncached: Combinable, read: Combinable, write: Combinable, write_1h: Combinable | None,
          output: Combinable, weights: Mapping[str, float]) -> ExpressionWrapper[CombinedExpression]:
    """ctxkit.figures.cost_units over the token expressions. ``write_1h`` (the part of ``write``
    with a 1-hour TTL) is read only when the weights price it apart (USD prices): relative
    weights price every write alike, so their expression never names the column."""
    # Added left to right in ctxkit.figures.cost_units' order, so both sum the same floats.
    total = (Cast(uncached, FloatField()) * Value(weights["input"])
             + Cast(read, FloatField()) * Value(weights["cache_read"]))
    if "cache_write_1h" in weights and write_1h is not None:
        total = (total + Cast(write - write_1h, FloatField()) * Value(weights["cache_write"])
                 + Cast(write_1h, FloatField()) * Value(weights["cache_write_1h"]))
    else:
        total = total + Cast(write, FloatField()) * Value(weights["cache_write"])
    return ExpressionWrapper(total + Cast(output, FloatField()) * Value(weights["output"]), output_field=FloatField())


def cache_write_1h_tokens(prefix: str = "") -> Least:
    """ctxkit.figures.cache_write_1h_tokens: the 1-hour part of the cache writes, never above them."""
    return Least(_f(prefix, "cache_write_1h_tokens"), _f(prefix, "cache_write_tokens"))


def cost_units(prefix: str = "", weights: Mapping[str, float] = COST_WEIGHTS) -> ExpressionWrapper[CombinedExpression]:
    """ctxkit.figures.cost_units: each kind of token at its weight."""
    write_1h = cache_write_1h_tokens(prefix) if "cache_write_1h" in weights else None
    return _cost(uncached_tokens(prefix), _f(prefix, "cache_read_tokens"), _f(prefix, "cache_write_tokens"),
                 write_1h, _f(prefix, "output_tokens"), weights)


def cost_usd(prices: UsdPrices, prefix: str = "") -> ExpressionWrapper[CombinedExpression]:
    """ctxkit.figures.cost_usd: cost_units at the model's USD prices per token (a model with no
    USD price has no expression: its cost in USD is null)."""
    return cost_units(prefix, prices.weights)


def cache_saving(prefix: str = "", weights: Mapping[str, float] = COST_WEIGHTS) -> Greatest:
    """ctxkit.figures.cache_saving: cost_units as paid less cost_units of ctxkit.figures.cached_usage
    (the prefix tokens not read moved to cache reads, first from the writes (5-minute ones before
    1-hour ones), then from the uncached input), never below 0."""
    read, write = _f(prefix, "cache_read_tokens"), _f(prefix, "cache_write_tokens")
    missed = Greatest(Value(0), _f(prefix, "prefix_tokens") - read)
    from_write = Least(write, missed)
    from_uncached = Least(uncached_tokens(prefix), missed - from_write)
    cached = _cost(uncached_tokens(prefix) - from_uncached, read + from_write + from_uncached, write - from_write,
                   Least(cache_write_1h_tokens(prefix), write - from_write) if "cache_write_1h" in weights else None,
                   _f(prefix, "output_tokens"), weights)
    return Greatest(Value(0.0), cost_units(prefix, weights) - cached, output_field=FloatField())


def compaction_reread_tokens(prefix: str = "") -> Coalesce:
    """The re-read tokens a compaction caused (docs/analysis.md, "Re-reads"): the sum of
    ``tokens`` (ctxkit.figures.reread_tokens) over the re-reads whose loss names it (their
    ``lost_call`` is its call, ``cause_ref`` its event id); 0 without any."""
    from manifests.models import ReRead

    caused = (ReRead.objects.filter(lost_call_id=OuterRef(f"{prefix}call_id"), cause_ref=OuterRef(f"{prefix}event_id"),
                                    cause="compaction")
              .values("lost_call_id").annotate(total=Sum("tokens")).values("total"))
    return Coalesce(Subquery(caused, output_field=BigIntegerField()), Value(0), output_field=BigIntegerField())


def net_saving(prefix: str = "", reread: Combinable | None = None) -> ExpressionWrapper[CombinedExpression]:
    """ctxkit.figures.net_saving of a compaction row: tokens_before − tokens_after − its re-read
    tokens (``reread``, by default :func:`compaction_reread_tokens`)."""
    caused = compaction_reread_tokens(prefix) if reread is None else reread
    return ExpressionWrapper(_f(prefix, "tokens_before") - _f(prefix, "tokens_after") - caused,
                             output_field=BigIntegerField())


def net_saving_cost(net: Combinable, weights: Mapping[str, float] = COST_WEIGHTS) -> ExpressionWrapper[
        CombinedExpression]:
    """ctxkit.figures.net_saving_cost: the net saving's tokens at the weight of an uncached input token."""
    return ExpressionWrapper(Cast(net, FloatField()) * Value(weights["input"]), output_field=FloatField())


def _ratio(numerator: Combinable, denominator: Combinable) -> ExpressionWrapper[CombinedExpression]:
    return ExpressionWrapper(Cast(numerator, FloatField()) / Cast(denominator, FloatField()),
                             output_field=FloatField())


def input_cap(window: Combinable, output_reserve: Combinable, safety_margin: Combinable) -> Greatest:
    """ctxkit.figures.input_cap: window − reserve − margin, never below 0."""
    return Greatest(Value(0), window - output_reserve - safety_margin, output_field=BigIntegerField())


def input_read(input_tokens: Combinable, context_tokens: Combinable) -> Case:
    """ctxkit.figures.input_read: the provider's input when it reported any, else the
    tokens in context (an expression: ``Sum(context_tokens())`` or a column holding it)."""
    return Case(When(GreaterThan(input_tokens, 0), then=input_tokens), default=context_tokens,
                output_field=BigIntegerField())


def headroom(cap: Combinable, read: Combinable) -> ExpressionWrapper[CombinedExpression]:
    """ctxkit.figures.headroom: input cap − input read (negative: over the cap)."""
    return ExpressionWrapper(cap - read, output_field=BigIntegerField())


def window_utilization(read: Combinable, window: Combinable) -> ExpressionWrapper[CombinedExpression]:
    """ctxkit.figures.window_utilization: input read over the window (at least 1)."""
    return _ratio(read, Greatest(Value(1), window))


def reserve_share(output_reserve: Combinable, window: Combinable) -> ExpressionWrapper[CombinedExpression]:
    """ctxkit.figures.reserve_share: output reserve over the window (at least 1)."""
    return _ratio(output_reserve, Greatest(Value(1), window))


def tool_share(tool_tokens: Combinable, context_tokens: Combinable) -> Case:
    """ctxkit.figures.tool_share: tool tokens over tokens in context; 0 with none."""
    return Case(When(GreaterThan(context_tokens, 0), then=_ratio(tool_tokens, context_tokens)),
                default=Value(0.0), output_field=FloatField())


def effective_limit(window: Combinable, ratio: float) -> Greatest:
    """ctxkit.figures.effective_limit: ``ratio`` of the window, rounded down (Python's int()
    of a non-negative number), at least 1."""
    scaled = Floor(ExpressionWrapper(Cast(window, FloatField()) * Value(ratio), output_field=FloatField()))
    return Greatest(Value(1), Cast(scaled, BigIntegerField()), output_field=BigIntegerField())


def effective_share(read: Combinable, limit: Combinable) -> ExpressionWrapper[CombinedExpression]:
    """ctxkit.figures.effective_share: input read over the effective limit (at least 1)."""
    return _ratio(read, Greatest(Value(1), limit))


def as_sql(expression: Any, model: type[Model], alias: str) -> str:
    """One of the expressions above (built with ``prefix=""``) as SQL text over the row
    of ``model``'s table named ``alias`` in the caller's FROM clause: the same definition,
    compiled by Django for the current database, for callers that write raw SQL. Its
    parameters (numbers: weights, 0; words: actions) are inlined, because the text is spliced into
    statements that carry parameters of their own."""
    from django.db import connection
    from django.db.models.sql import Query

    query = Query(model)
    resolved = expression.resolve_expression(query, allow_joins=False)
    resolved = resolved.relabeled_clone({model._meta.db_table: alias})
    sql, params = query.get_compiler(connection=connection).compile(resolved)
    text: str = sql % tuple(_literal(p) for p in params)
    return text


def _literal(value: Any) -> str:
    if isinstance(value, str) and not set(value) & {"'", "%", "\\"}:
        return f"'{value}'"  # the actions of in_context: plain words
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"as_sql inlines finite numbers and plain words only, not {value!r}")
    # int()/float() unwrap the driver's typed wrappers (psycopg's Int4); repr round-trips
    # a float exactly; parentheses keep "- -1" from reading as a comment.
    text = str(int(value)) if isinstance(value, int) else repr(float(value))
    return f"({text})" if value < 0 else text
