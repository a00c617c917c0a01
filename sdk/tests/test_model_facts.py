"""Model facts from genai-prices' bundled table: the window a recorded manifest states, and a
call's cost in USD, checked against genai-prices' own calculation."""

from __future__ import annotations

from datetime import UTC, datetime

import genai_prices
import pytest

from ctxkit import figures
from ctxkit.manifest import Usage, semantic_errors
from ctxkit.models import DEFAULT_WINDOW, WINDOW_ASSUMED, model_facts, window_for
from ctxkit.record.call_items import Part, call_manifest
from ctxkit.record.usage import normalize_usage

AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def recorded(model: str, provider: str = "anthropic", usage: Usage | None = None):
    return call_manifest(call_id="c1", run_id="r1", step=0, model=model, provider=provider, agent="a",
                         started_at=AT, ended_at=None, usage=usage,
                         parts=[Part(role="system", text="You are terse."), Part(role="user", text="hi")])


def test_it_states_the_tables_window_for_a_manifest_without_one():
    m = recorded("claude-opus-5-5")
    assert m.budget.window == 1_000_000
    assert not any(w.startswith(WINDOW_ASSUMED) for w in m.warnings)
    assert recorded("claude-sonnet-4-5-20250929").budget.window == 200_000


def test_it_keeps_a_window_the_agent_states():
    m = call_manifest(call_id="c1", run_id="r1", step=0, model="claude-opus-5-5", provider="anthropic", agent="a",
                      started_at=AT, ended_at=None, parts=[Part(role="user", text="hi")], window=300_000)
    assert m.budget.window == 300_000 and not m.warnings


def test_it_says_window_assumed_for_a_model_the_table_does_not_know():
    m = recorded("claude-internal-preview-9")
    assert m.budget.window == 200_000  # the family guess
    assert [w for w in m.warnings if w.startswith(WINDOW_ASSUMED)]
    assert window_for("house-model-7") == (DEFAULT_WINDOW, False)
    assert model_facts("house-model-7") is None


def test_it_reads_the_models_own_cache_read_ratio():
    prices = model_facts("claude-opus-5-5", "anthropic").prices_at(at=AT)
    assert prices.cache_read / prices.input == pytest.approx(0.05)
    assert prices.cache_write_1h > prices.cache_write > prices.input
    sonnet = model_facts("claude-sonnet-4-5", "anthropic").prices_at(at=AT)
    assert sonnet.cache_read / sonnet.input == pytest.approx(0.1)


@pytest.mark.parametrize("model", ["claude-opus-5-5", "claude-sonnet-4-5", "gpt-5", "claude-haiku-5-5"])
@pytest.mark.parametrize("input_tokens", [40_000, 180_000])
def test_it_prices_a_call_in_usd_as_genai_prices_does(model, input_tokens):
    usage = Usage(input_tokens=input_tokens, cache_read_tokens=input_tokens // 2, cache_write_tokens=9_000,
                  cache_write_1h_tokens=4_000, output_tokens=1_500)
    facts = model_facts(model)
    ours = figures.cost_usd(usage, facts.prices_at(usage.input_tokens, AT))
    theirs = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=usage.input_tokens, cache_read_tokens=usage.cache_read_tokens,
                           cache_write_tokens=usage.cache_write_tokens,
                           cache_write_1h_tokens=usage.cache_write_1h_tokens, output_tokens=usage.output_tokens),
        model, genai_request_timestamp=AT).total_price
    assert ours == pytest.approx(float(theirs), rel=1e-9)


def test_it_prices_the_1h_cache_writes_of_an_anthropic_usage():
    raw = {"input_tokens": 10, "cache_read_input_tokens": 5_000, "cache_creation_input_tokens": 3_000,
           "cache_creation": {"ephemeral_5m_input_tokens": 1_000, "ephemeral_1h_input_tokens": 2_000},
           "output_tokens": 200}
    usage = normalize_usage(raw, "anthropic")
    assert (usage.input_tokens, usage.cache_write_tokens, usage.cache_write_1h_tokens) == (8_010, 3_000, 2_000)
    m = recorded("claude-opus-5-5", usage=usage)
    assert semantic_errors(m) == []
    prices = model_facts("claude-opus-5-5").prices_at(usage.input_tokens, AT)
    expected = 10 * prices.input + 5_000 * prices.cache_read + 1_000 * prices.cache_write \
        + 2_000 * prices.cache_write_1h + 200 * prices.output
    assert figures.cost_usd(m.usage, prices) == pytest.approx(expected)
    assert figures.cost_usd(m.usage, None) is None


def test_it_refuses_more_1h_writes_than_writes():
    m = recorded("claude-opus-5-5", usage=Usage(input_tokens=100, cache_write_tokens=10, cache_write_1h_tokens=20))
    assert [e.path for e in semantic_errors(m)] == ["$.usage.cache_write_1h_tokens"]


def test_it_prices_a_cache_miss_with_the_models_own_ratio():
    usage = Usage(input_tokens=60_000, cache_read_tokens=0, cache_write_tokens=50_000, cache_write_1h_tokens=50_000,
                  output_tokens=100)
    prices = model_facts("claude-opus-5-5").prices_at(usage.input_tokens, AT)
    saving = figures.cache_saving(usage, 50_000, prices.weights)
    assert saving == pytest.approx(50_000 * (prices.cache_write_1h - prices.cache_read))


def test_it_prices_a_recorded_manifest_in_usd_from_the_top_level_api():
    import ctxkit

    m = recorded("claude-opus-5-5", usage=Usage(input_tokens=2_000, cache_read_tokens=1_000, output_tokens=100))
    prices = ctxkit.model_facts("claude-opus-5-5").prices_at(2_000, AT)
    assert ctxkit.cost_usd(m) == pytest.approx(1_000 * prices.input + 1_000 * prices.cache_read + 100 * prices.output)
    assert ctxkit.cost_usd(m.usage, "claude-opus-5-5", at=AT) == ctxkit.cost_usd(m)
    assert ctxkit.cost_usd(m.usage, "house-model-7") is None
    assert ctxkit.window_for("claude-opus-5-5") == (1_000_000, True)
