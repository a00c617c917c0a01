"""Cost in relative units, the caching break-even and the TTL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import ctxkit.costs  # noqa: F401  (the module is loaded; ctxkit.cost must still be the function)
from ctxkit import ContextBuilder, Segment, cache_break_even, cache_saving, cost, run_cost, ttl_expired
from ctxkit.figures import cost_units
from ctxkit.manifest import Usage

K = 1000  # units per 1k uncached input tokens (one uncached input token = 1)


def _run(*, cache: bool, window: bool) -> list[Usage]:
    """10 steps, stable prefix P = 3.2k, history +2k a step (capped at 8k by the
    sliding window from step 4), 0.5k output a step."""
    calls = []
    for step in range(1, 11):
        history = min(2 * K * step, 8 * K) if window else 2 * K * step
        prefix = int(3.2 * K)
        read = prefix if cache and step > 1 else 0
        write = prefix if cache and step == 1 else 0
        calls.append(Usage(input_tokens=prefix + history, cache_read_tokens=read, cache_write_tokens=write,
                           output_tokens=K // 2))
    return calls


def test_run_cost_of_three_caching_strategies() -> None:
    """B costs 42k units less than C, C 25k less than A."""
    a = run_cost(_run(cache=False, window=False))
    c = run_cost(_run(cache=True, window=False))
    b = run_cost(_run(cache=True, window=True))
    assert a.calls == 10 and a.total == pytest.approx(162 * K)
    assert (c.total - b.total) / K == pytest.approx(42)
    assert (a.total - c.total) / K == pytest.approx(25.12)
    assert a.per_call[0] == cost(_run(cache=False, window=False)[0]) == (3.2 + 2) * K + 4 * K // 2


def test_cost_is_the_one_definition_in_figures() -> None:
    """Input 1, output 4, cache read 0.1, cache write 1.25."""
    usage = Usage(input_tokens=1000, cache_read_tokens=500, cache_write_tokens=100, output_tokens=10)
    assert cost(usage) == cost_units(usage) == 400 + 50 + 125 + 40
    raw_anthropic = {"input_tokens": 400, "cache_read_input_tokens": 500, "cache_creation_input_tokens": 100,
                     "output_tokens": 10}
    assert cost(raw_anthropic) == cost(usage)


def test_break_even_call_count() -> None:
    """n > 1.28 with the default weights; n > 3 with c_write = 2, c_read = 0.5."""
    assert cache_break_even() == pytest.approx(1.28, abs=0.005)
    assert cache_break_even({"input": 1, "cache_read": 0.5, "cache_write": 2, "output": 4}) == pytest.approx(3)
    assert cache_saving(3200, 1) < 0 < cache_saving(3200, 2)
    pricey = {"input": 1, "cache_read": 0.5, "cache_write": 2, "output": 4}
    assert cache_saving(3200, 2, pricey) < 0 == cache_saving(3200, 3, pricey)  # two steps: caching costs more


def test_ttl_expiry_and_the_ttl_in_the_manifest() -> None:
    """A 40-minute approval outlives a minutes-long TTL; the manifest records the TTL."""
    t0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    assert ttl_expired(t0, t0 + timedelta(minutes=40), 300)
    assert not ttl_expired(t0, t0 + timedelta(minutes=4), 300)
    builder = ContextBuilder(budget=2000, cache_ttl_seconds=300)
    built = builder.build([Segment(name="system", kind="system", text="规则。", policy="pin")])
    assert built.manifest(call_id="c", run_id="r", step=0, model="m").cache_ttl_seconds == 300
