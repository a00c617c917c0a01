"""Normalising provider usage into the manifest's one form (token-usage-fields.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from ctxkit.manifest import ContextEdit, Usage, convert_manifest
from ctxkit.record.usage import (
    applied_edits_to_manifest,
    cache_hit_ratio,
    detect_provider,
    normalize_usage,
    uncached_input_tokens,
)


def usage(input_tokens: int, read: int = 0, write: int = 0, output: int = 0, reasoning: int | None = None,
          write_1h: int = 0) -> Usage:
    return Usage(
        input_tokens=input_tokens,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=output,
        reasoning_tokens=reasoning,
        cache_write_1h_tokens=write_1h,
    )


def manifest_accepts(u: Usage) -> bool:
    body = {
        "schema": "ctxview.manifest/v1",
        "call_id": "c",
        "run_id": "r",
        "step": 0,
        "model": "m",
        "started_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "budget": {"window": 1000},
        "usage": msgspec.to_builtins(u),
    }
    manifest, errors = convert_manifest(body)
    return manifest is not None and errors == []


class Pydanticish:
    """Stands in for an SDK response model: fields as attributes plus model_dump()."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        for key, value in data.items():
            setattr(self, key, value)

    def model_dump(self) -> dict[str, Any]:
        return self._data


ANTHROPIC = {
    "input_tokens": 100,
    "cache_read_input_tokens": 1000,
    "cache_creation_input_tokens": 200,
    "output_tokens": 50,
}


# --------------------------------------------------------------------------- #
# Anthropic


def test_anthropic_adds_the_cache_beside_input_tokens() -> None:
    u = normalize_usage(ANTHROPIC)
    assert u == usage(1300, read=1000, write=200, output=50)
    assert uncached_input_tokens(u) == 100
    assert manifest_accepts(u)


def test_anthropic_ttl_split_is_summed_when_the_total_write_is_absent() -> None:
    u = normalize_usage(
        {"input_tokens": 10, "cache_creation": {"ephemeral_5m_input_tokens": 30, "ephemeral_1h_input_tokens": 70}},
        provider="anthropic",
    )
    assert u == usage(110, write=100, write_1h=70)


def test_anthropic_ttl_split_is_not_added_on_top_of_the_total_write() -> None:
    u = normalize_usage(
        {**ANTHROPIC, "cache_creation": {"ephemeral_5m_input_tokens": 150, "ephemeral_1h_input_tokens": 50}}
    )
    assert u == usage(1300, read=1000, write=200, output=50, write_1h=50)


def test_anthropic_whole_message_sdk_object_and_stream_event_are_accepted() -> None:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "usage": ANTHROPIC}
    expected = usage(1300, read=1000, write=200, output=50)
    assert normalize_usage(message) == expected
    assert normalize_usage(Pydanticish(message)) == expected
    assert normalize_usage(SimpleNamespace(usage=SimpleNamespace(**ANTHROPIC))) == expected
    assert normalize_usage({"type": "message_start", "message": message}) == expected
    assert normalize_usage({"type": "message_delta", "usage": {"output_tokens": 77}}) == usage(0, output=77)


# --------------------------------------------------------------------------- #
# OpenAI


def test_openai_chat_counts_cached_tokens_inside_prompt_tokens() -> None:
    raw = {
        "prompt_tokens": 1500,
        "completion_tokens": 300,
        "total_tokens": 1800,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 120},
    }
    u = normalize_usage(raw)
    assert u == usage(1500, read=1024, output=300, reasoning=120)
    assert uncached_input_tokens(u) == 476
    assert normalize_usage({"object": "chat.completion", "usage": raw}) == u
    assert normalize_usage(Pydanticish({"object": "chat.completion", "usage": Pydanticish(raw)})) == u


def test_openai_chat_cache_write_tokens_are_read_where_present() -> None:
    nested = {
        "prompt_tokens": 2000,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 1500},
    }
    top = {"prompt_tokens": 2000, "completion_tokens": 5, "cache_write_tokens": 1500}
    assert normalize_usage(nested) == usage(2000, write=1500, output=5)
    assert normalize_usage(top, provider="openai") == usage(2000, write=1500, output=5)


def test_openai_responses_counts_cached_tokens_inside_input_tokens() -> None:
    raw = {
        "input_tokens": 5000,
        "input_tokens_details": {"cached_tokens": 4096},
        "output_tokens": 900,
        "output_tokens_details": {"reasoning_tokens": 700},
        "total_tokens": 5900,
    }
    expected = usage(5000, read=4096, output=900, reasoning=700)
    assert normalize_usage(raw) == expected
    assert normalize_usage({"object": "response", "usage": raw}) == expected
    assert normalize_usage(raw, provider="openai") == expected
    assert normalize_usage(raw, provider="openai_responses") == expected


# --------------------------------------------------------------------------- #
# Gemini


def test_gemini_snake_case_counts_thoughts_as_output() -> None:
    raw = {
        "prompt_token_count": 3000,
        "cached_content_token_count": 2048,
        "candidates_token_count": 400,
        "thoughts_token_count": 250,
        "total_token_count": 3650,
    }
    u = normalize_usage({"usage_metadata": raw})
    assert u == usage(3000, read=2048, output=650, reasoning=250)
    assert u.input_tokens + u.output_tokens == raw["total_token_count"]
    assert manifest_accepts(u)


def test_gemini_rest_camel_case_is_the_same() -> None:
    raw = {
        "promptTokenCount": 3000,
        "cachedContentTokenCount": 2048,
        "candidatesTokenCount": 400,
        "thoughtsTokenCount": 250,
    }
    assert normalize_usage({"usageMetadata": raw}) == usage(3000, read=2048, output=650, reasoning=250)
    assert normalize_usage(raw, provider="gemini") == usage(3000, read=2048, output=650, reasoning=250)


def test_gemini_tool_use_prompt_tokens_count_as_input_once() -> None:
    raw = {"promptTokenCount": 100, "toolUsePromptTokenCount": 40, "candidatesTokenCount": 10, "totalTokenCount": 150}
    u = normalize_usage(raw)
    assert u == usage(140, output=10)
    assert u.input_tokens + u.output_tokens == raw["totalTokenCount"]


def test_gemini_without_thoughts_reports_no_reasoning() -> None:
    u = normalize_usage(SimpleNamespace(usage_metadata=SimpleNamespace(prompt_token_count=9, candidates_token_count=3)))
    assert u == usage(9, output=3)
    assert u.reasoning_tokens is None


# --------------------------------------------------------------------------- #
# OpenTelemetry


def test_otel_gen_ai_attributes() -> None:
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.usage.input_tokens": 1300,
        "gen_ai.usage.output_tokens": 50,
        "gen_ai.usage.cache_read.input_tokens": 1000,
        "gen_ai.usage.cache_creation.input_tokens": 200,
        "gen_ai.usage.reasoning.output_tokens": 20,
    }
    assert normalize_usage(attrs) == usage(1300, read=1000, write=200, output=50, reasoning=20)


def test_otel_older_names_and_openinference() -> None:
    old = {
        "gen_ai.usage.prompt_tokens": 80,
        "gen_ai.usage.completion_tokens": 8,
        "gen_ai.usage.cache_read_input_tokens": 64,
    }
    oi = {
        "llm.token_count.prompt": 80,
        "llm.token_count.completion": 8,
        "llm.token_count.prompt_details.cache_read": 64,
        "llm.token_count.prompt_details.cache_write": 16,
    }
    assert normalize_usage(old) == usage(80, read=64, output=8)
    assert normalize_usage(oi, provider="openinference") == usage(80, read=64, write=16, output=8)


def test_otlp_json_spans_with_string_integers() -> None:
    span = {
        "name": "chat claude",
        "attributes": [
            {"key": "gen_ai.provider.name", "value": {"stringValue": "anthropic"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "1300"}},
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "50"}},
            {"key": "gen_ai.usage.cache_read.input_tokens", "value": {"intValue": 1000}},
        ],
    }
    assert normalize_usage(span) == usage(1300, read=1000, output=50)
    assert normalize_usage(span["attributes"]) == usage(1300, read=1000, output=50)


def test_otel_with_anthropic_style_uncached_input_is_not_negative() -> None:
    # An instrumentation that copied Anthropic's uncached input_tokens: the cache parts exceed
    # the input, which is only possible if they sit beside it.
    attrs = {
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.cache_read.input_tokens": 1000,
        "gen_ai.usage.output_tokens": 5,
    }
    u = normalize_usage(attrs)
    assert u == usage(1100, read=1000, output=5)
    assert uncached_input_tokens(u) == 100


# --------------------------------------------------------------------------- #
# Never negative, never double counted


def test_the_same_call_reported_by_two_providers_normalises_to_the_same_usage() -> None:
    anthropic = normalize_usage({"input_tokens": 476, "cache_read_input_tokens": 1024, "output_tokens": 300})
    openai = normalize_usage(
        {"prompt_tokens": 1500, "completion_tokens": 300, "prompt_tokens_details": {"cached_tokens": 1024}}
    )
    assert anthropic == openai


def test_bad_numbers_are_clamped_so_uncached_is_never_negative() -> None:
    u = normalize_usage(
        {
            "prompt_tokens": 100,
            "completion_tokens": -5,
            "prompt_tokens_details": {"cached_tokens": 150},
            "completion_tokens_details": {"reasoning_tokens": 9},
        }
    )
    assert u == usage(100, read=100, output=0, reasoning=0)
    assert uncached_input_tokens(u) == 0
    assert manifest_accepts(u)
    neg = normalize_usage({"input_tokens": -10, "cache_read_input_tokens": "x", "output_tokens": 3.0})
    assert neg == usage(0, output=3)


# --------------------------------------------------------------------------- #
# Provider selection


def test_provider_detection_by_shape() -> None:
    assert detect_provider({"input_tokens": 1, "cache_read_input_tokens": 0}) == "anthropic"
    assert detect_provider({"prompt_tokens": 1}) == "openai_chat"
    assert detect_provider({"input_tokens": 1, "input_tokens_details": {}}) == "openai_responses"
    assert detect_provider({"promptTokenCount": 1}) == "gemini"
    assert detect_provider({"gen_ai.usage.input_tokens": 1}) == "otel"


def test_explicit_provider_wins_over_detection() -> None:
    raw = {"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 50}
    assert normalize_usage(raw, provider="anthropic") == usage(150, read=50, output=5)
    assert normalize_usage(raw, provider="openai_responses") == usage(100, output=5)  # no cached_tokens field there


def test_unknown_provider_or_shape_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown provider"):
        normalize_usage({"input_tokens": 1}, provider="mystery")
    with pytest.raises(ValueError, match="cannot tell the provider"):
        normalize_usage({"tokens": 5})


def test_cache_hit_ratio() -> None:
    assert cache_hit_ratio(usage(1300, read=1000, write=200)) == pytest.approx(1000 / 1300)
    assert cache_hit_ratio(usage(0)) is None  # no input: no hit rate (ctxkit.figures)


# --------------------------------------------------------------------------- #
# Anthropic applied edits


def test_applied_edits_become_context_edits() -> None:
    cm = {
        "applied_edits": [
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 4, "cleared_input_tokens": 51234},
            {"type": "clear_thinking_20251015", "cleared_thinking_turns": 2, "cleared_input_tokens": 800},
        ]
    }
    expected = [
        ContextEdit(type="clear_tool_uses", cleared_count=4, cleared_tokens=51234),
        ContextEdit(type="clear_thinking", cleared_count=2, cleared_tokens=800),
    ]
    assert applied_edits_to_manifest(cm) == expected
    assert applied_edits_to_manifest({"type": "message", "context_management": cm}) == expected
    assert applied_edits_to_manifest(cm["applied_edits"]) == expected
    assert applied_edits_to_manifest(Pydanticish({"context_management": Pydanticish(cm)})) == expected


def test_no_context_management_means_no_edits() -> None:
    assert applied_edits_to_manifest(None) == []
    assert applied_edits_to_manifest({"applied_edits": []}) == []
