"""Normalise a provider's token usage into the manifest's one form.

Normal form (OpenTelemetry's meaning, see docs reference token-usage-fields.md):
``input_tokens`` includes cache reads and writes, ``output_tokens`` includes reasoning.
The trap: Anthropic reports cached tokens *beside* ``input_tokens``; OpenAI, Gemini and
OpenTelemetry report them *inside*. Adding where one must include, or including where one
must add, double counts or yields negative uncached counts; both are prevented here.

Accepts dicts, SDK response objects (attributes, pydantic ``model_dump``), whole responses
or just their usage part, OpenTelemetry attribute dicts and OTLP JSON attribute lists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ctxkit import figures
from ctxkit.manifest import MAX_TOKENS, ContextEdit, Usage

PROVIDERS = ("anthropic", "openai_chat", "openai_responses", "gemini", "otel")
_ALIASES = {
    "anthropic": "anthropic",
    "claude": "anthropic",
    "openai_chat": "openai_chat",
    "openai.chat": "openai_chat",
    "chat": "openai_chat",
    "openai_responses": "openai_responses",
    "openai.responses": "openai_responses",
    "responses": "openai_responses",
    "gemini": "gemini",
    "google": "gemini",
    "gcp.gemini": "gemini",
    "vertex": "gemini",
    "vertex_ai": "gemini",
    "gcp.vertex_ai": "gemini",
    "otel": "otel",
    "opentelemetry": "otel",
    "openinference": "otel",
}

_OTEL_INPUT = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
_OTEL_OUTPUT = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")
_OTEL_READ = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
)
_OTEL_WRITE = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
    "gen_ai.usage.cache_write.input_tokens",  # the anthropic SDK's own spans
    "llm.token_count.prompt_details.cache_write",
)
_OTEL_REASONING = ("gen_ai.usage.reasoning.output_tokens", "llm.token_count.completion_details.reasoning")


# --------------------------------------------------------------------------- #
# Reading dicts and SDK objects alike


def _as_mapping(obj: Any) -> Any:
    """A dict view of an SDK object when it offers one; otherwise the object itself."""
    if obj is None or isinstance(obj, Mapping):
        return obj
    if isinstance(obj, list):
        return _otlp_attributes(obj)
    for method in ("model_dump", "to_dict"):
        func = getattr(obj, method, None)
        if callable(func):
            try:
                value = func()
            except TypeError:
                continue
            if isinstance(value, Mapping):
                return value
    return obj


def _get(obj: Any, *names: str) -> Any:
    """The first present, non-None field of ``obj`` among ``names`` (dict key or attribute)."""
    if obj is None:
        return None
    for name in names:
        if isinstance(obj, Mapping):
            value = obj.get(name)
        else:
            value = getattr(obj, name, None)
        if value is not None:
            return value
    return None


def _path(obj: Any, *path: str) -> Any:
    for name in path:
        obj = _get(_as_mapping(obj), name)
    return obj


def _int(value: Any) -> int:
    """A token count: ints, floats and decimal strings (OTLP JSON) accepted, never negative."""
    if value is None or isinstance(value, bool):
        return 0
    try:
        number = int(float(value)) if isinstance(value, (str, float)) else int(value)
    except (TypeError, ValueError):
        return 0
    return min(max(number, 0), MAX_TOKENS)


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _otlp_attributes(items: list[Any]) -> dict[str, Any]:
    """OTLP JSON ``[{"key": k, "value": {"intValue": "12"}}]`` to ``{k: "12"}``."""
    out: dict[str, Any] = {}
    for entry in items:
        if isinstance(entry, Mapping) and "key" in entry:
            value = entry.get("value")
            if isinstance(value, Mapping) and len(value) == 1:
                value = next(iter(value.values()))
            out[str(entry["key"])] = value
    return out


def _keys(obj: Any) -> set[str]:
    if isinstance(obj, Mapping):
        return {str(k) for k, v in obj.items() if v is not None}
    return {k for k in dir(obj) if not k.startswith("_")}


# --------------------------------------------------------------------------- #
# Detection


def _unwrap(obj: Any) -> tuple[Any, str | None]:
    """The usage part of a whole response or event, and a provider hint from its envelope."""
    obj = _as_mapping(obj)
    hint: str | None = None
    kind = _get(obj, "object")
    if kind == "chat.completion" or kind == "chat.completion.chunk":
        hint = "openai_chat"
    elif kind == "response":
        hint = "openai_responses"
    elif _get(obj, "type") in ("message", "message_start", "message_delta"):
        hint = "anthropic"
    message = _get(obj, "message")  # Anthropic's message_start event wraps the message
    if _get(obj, "usage") is None and message is not None and _get(_as_mapping(message), "usage") is not None:
        obj, hint = _as_mapping(message), "anthropic"
    for key in ("usage_metadata", "usageMetadata"):
        inner = _get(obj, key)
        if inner is not None:
            return _as_mapping(inner), "gemini"
    inner = _get(obj, "usage")
    if inner is not None:
        return _as_mapping(inner), hint
    attributes = _get(obj, "attributes")  # an OpenTelemetry span (SDK object or OTLP JSON)
    if isinstance(attributes, Mapping | list):
        return _as_mapping(attributes), "otel"
    return obj, hint


_GEMINI_KEYS = frozenset(
    {
        "prompt_token_count",
        "promptTokenCount",
        "candidates_token_count",
        "candidatesTokenCount",
        "cached_content_token_count",
        "cachedContentTokenCount",
        "total_token_count",
        "totalTokenCount",
    }
)


def detect_provider(usage: Any) -> str:
    """Which provider's shape ``usage`` (the usage part itself) has."""
    keys = _keys(usage)
    if any(k.startswith(("gen_ai.", "llm.token_count.")) for k in keys):
        return "otel"
    if keys & _GEMINI_KEYS:
        return "gemini"
    if keys & {"prompt_tokens", "completion_tokens", "prompt_tokens_details", "completion_tokens_details"}:
        return "openai_chat"
    if keys & {"input_tokens_details", "output_tokens_details"}:
        return "openai_responses"
    if keys & {"input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}:
        # Without *_details the two shapes only differ in the cache fields, which are
        # Anthropic's; a bare {input_tokens, output_tokens} means the same in both.
        return "anthropic"
    raise ValueError(f"cannot tell the provider of this usage (fields: {sorted(keys)[:12]})")


# --------------------------------------------------------------------------- #
# Normalisation


def normalize_usage(obj: Any, provider: str | None = None) -> Usage:
    """One model call's usage in normal form. ``provider`` is autodetected when None."""
    usage, hint = _unwrap(obj)
    if provider is not None:
        name = _ALIASES.get(provider.lower())
        if name is None and provider.lower() == "openai":
            keys = _keys(usage)
            name = "openai_responses" if keys & {"input_tokens", "input_tokens_details"} else "openai_chat"
        if name is None:
            raise ValueError(f"unknown provider {provider!r}; expected one of {', '.join(PROVIDERS)}")
    else:
        name = hint or detect_provider(usage)
    return _NORMALISERS[name](usage)


def _inclusive(input_tokens: int, read: int, write: int, output: int, reasoning: int | None) -> Usage:
    """Build a Usage whose input already includes the cache; clamp inconsistent parts so that
    uncached = input - read - write is never negative and reasoning never exceeds output."""
    read = min(read, input_tokens)
    write = min(write, input_tokens - read)
    if reasoning is not None:
        reasoning = min(reasoning, output)
    return Usage(
        input_tokens=input_tokens,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=output,
        reasoning_tokens=reasoning,
    )


def _anthropic(u: Any) -> Usage:
    read = _int(_get(u, "cache_read_input_tokens"))
    write_value = _get(u, "cache_creation_input_tokens")
    split = _as_mapping(_get(u, "cache_creation"))
    write_1h = _int(_get(split, "ephemeral_1h_input_tokens"))
    if write_value is None:
        # Only the TTL split was reported: sum it, so 5m and 1h writes are both counted once.
        write = _int(_get(split, "ephemeral_5m_input_tokens")) + write_1h
    else:
        write = _int(write_value)
    # Anthropic's input_tokens is the uncached part only: add the cache beside it.
    total = min(_int(_get(u, "input_tokens")) + read + write, MAX_TOKENS)
    usage = _inclusive(total, read, write, _int(_get(u, "output_tokens")), None)
    usage.cache_write_1h_tokens = min(write_1h, usage.cache_write_tokens)
    return usage


def _openai_chat(u: Any) -> Usage:
    details = _as_mapping(_get(u, "prompt_tokens_details"))
    write = _get(details, "cache_write_tokens", "cache_creation_tokens")
    if write is None:
        write = _get(u, "cache_write_tokens")
    reasoning = _path(u, "completion_tokens_details", "reasoning_tokens")
    return _inclusive(
        _int(_get(u, "prompt_tokens")),
        _int(_get(details, "cached_tokens")),
        _int(write),
        _int(_get(u, "completion_tokens")),
        _opt_int(reasoning),
    )


def _openai_responses(u: Any) -> Usage:
    details = _as_mapping(_get(u, "input_tokens_details"))
    write = _get(details, "cache_write_tokens", "cache_creation_tokens")
    if write is None:
        write = _get(u, "cache_write_tokens")
    return _inclusive(
        _int(_get(u, "input_tokens")),
        _int(_get(details, "cached_tokens")),
        _int(write),
        _int(_get(u, "output_tokens")),
        _opt_int(_path(u, "output_tokens_details", "reasoning_tokens")),
    )


def _gemini(u: Any) -> Usage:
    prompt = _int(_get(u, "prompt_token_count", "promptTokenCount"))
    # Tool-use prompt tokens are input the model read, reported beside prompt_token_count
    # (total = prompt + tool_use_prompt + candidates + thoughts).
    tool_prompt = _int(_get(u, "tool_use_prompt_token_count", "toolUsePromptTokenCount"))
    thoughts = _opt_int(_get(u, "thoughts_token_count", "thoughtsTokenCount"))
    candidates = _int(_get(u, "candidates_token_count", "candidatesTokenCount"))
    return _inclusive(
        min(prompt + tool_prompt, MAX_TOKENS),
        _int(_get(u, "cached_content_token_count", "cachedContentTokenCount")),  # inside prompt_token_count
        0,
        min(candidates + (thoughts or 0), MAX_TOKENS),
        thoughts,
    )


def _otel(attrs: Any) -> Usage:
    input_tokens = _int(_get(attrs, *_OTEL_INPUT))
    read = _int(_get(attrs, *_OTEL_READ))
    write = _int(_get(attrs, *_OTEL_WRITE))
    if read + write > input_tokens:
        # The conventions say input includes the cache, but some instrumentations copy
        # Anthropic's uncached input_tokens verbatim; cache parts larger than the input give
        # that away, so add them rather than report a negative uncached count.
        input_tokens = min(input_tokens + read + write, MAX_TOKENS)
    output = _int(_get(attrs, *_OTEL_OUTPUT))
    return _inclusive(input_tokens, read, write, output, _opt_int(_get(attrs, *_OTEL_REASONING)))


_NORMALISERS = {
    "anthropic": _anthropic,
    "openai_chat": _openai_chat,
    "openai_responses": _openai_responses,
    "gemini": _gemini,
    "otel": _otel,
}


def uncached_input_tokens(usage: Usage) -> int:
    """ctxkit.figures.uncached_tokens (kept under this name for existing callers)."""
    return figures.uncached_tokens(usage)


def cache_hit_ratio(usage: Usage) -> float | None:
    """ctxkit.figures.hit_rate of the usage: None when there was no input."""
    return figures.hit_rate(usage.cache_read_tokens, usage.input_tokens)


# --------------------------------------------------------------------------- #
# Anthropic context editing

_DATED = re.compile(r"_\d{8}$")


def applied_edits_to_manifest(context_management: Any) -> list[ContextEdit]:
    """Anthropic's ``context_management.applied_edits[]`` as manifest ContextEdits.

    Accepts the ``context_management`` object, a whole response holding it, or the list of
    applied edits. ``clear_tool_uses_20250919`` becomes type ``clear_tool_uses`` (the date
    suffix is the API version, not part of what happened).
    """
    cm = _as_mapping(context_management) if not isinstance(context_management, list) else context_management
    if not isinstance(cm, list):
        inner = _get(cm, "context_management")
        if inner is not None:
            cm = _as_mapping(inner)
        cm = _get(cm, "applied_edits") if not isinstance(cm, list) else cm
    edits: list[ContextEdit] = []
    for raw in cm or []:
        edit = _as_mapping(raw)
        kind = str(_get(edit, "type") or "unknown")
        count = _get(edit, "cleared_tool_uses", "cleared_thinking_turns")
        edits.append(
            ContextEdit(
                type=_DATED.sub("", kind)[:200],
                cleared_count=_int(count),
                cleared_tokens=_int(_get(edit, "cleared_input_tokens")),
            )
        )
    return edits
