"""Anthropic Messages (``POST /v1/messages``): routing, a call's request, response or stream as
a manifest, its answer, tool calls and errors as the proxy reads them.

Routing: a request is Anthropic's when its path is under ``/v1/messages`` or ``/v1/complete`` or
it carries an ``anthropic-version`` header (every Anthropic client sends one; ``/v1/models`` and
``/v1/files`` exist in OpenAI's API too); only ``POST /v1/messages`` is recorded.

Prefix segments follow Anthropic's cache order: tools, then system, then messages up to the
last ``cache_control`` breakpoint (all messages with a top-level ``cache_control``). Usage:
Anthropic's ``input_tokens`` is the uncached part; normalisation adds the cache reads and
writes (ctxkit.record.usage). Context edits come from ``context_management.applied_edits``;
server-side compaction from ``usage.iterations`` entries of type ``compaction``; a
``compaction`` block sent back in the messages is a ``summary`` item, and so is an agent's own
compaction summary in the first user message (ctxkit.agents). The manifest's
``cache_ttl_seconds`` is the TTL the request's ``cache_control`` breakpoints asked for
(:func:`cache_ttl_seconds`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ctxkit.agents import summary_strategy
from ctxkit.context.layout import canonical_json
from ctxkit.manifest import Builder, Compaction, Manifest, Outcome
from ctxkit.providers.call import Adapter, CallRecord, field, plain
from ctxkit.providers.common import (
    Message,
    ToolCall,
    answer_id,
    block_text,
    body_as_sent,
    entries_of,
    error_json,
    nested_error_type,
)
from ctxkit.providers.common import well_formed as _well_formed
from ctxkit.providers.sse import json_events
from ctxkit.record.call_items import Part, call_manifest, text_of
from ctxkit.record.usage import applied_edits_to_manifest, normalize_usage

if TYPE_CHECKING:
    from ctxkit.proxy.lru import ObjectMemo

NAME = "anthropic"
UPSTREAM = "anthropic"
HOOK = "post"  # ctxkit.instrument hooks each resource's _post
SDK = "anthropic"
MESSAGES = "anthropic.messages"
FIELDS: dict[str, tuple[type, ...]] = {"model": (str,), "max_tokens": (int, float), "system": (str, list),
                                       "tools": (list,), "messages": (list,)}


def _without_cache_control(block: Any) -> Any:
    if isinstance(block, dict) and "cache_control" in block:
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


# Anthropic's cache_control TTLs; a breakpoint without one is cached for 5 minutes.
TTL_SECONDS = {"5m": 300, "1h": 3600}
DEFAULT_TTL = "5m"


def _ttl_of(cache_control: Any) -> int | None:
    if not isinstance(cache_control, dict) or not cache_control:
        return None
    ttl = cache_control.get("ttl", DEFAULT_TTL)
    return TTL_SECONDS.get(ttl) if isinstance(ttl, str) else None


def cache_ttl_seconds(kwargs: dict[str, Any]) -> int | None:
    """The prompt-cache TTL the request (its parameters as plain JSON) asked for, in seconds: the longest among its
    ``cache_control`` breakpoints (on tools, system blocks, message content blocks, and the
    top-level one of automatic caching); None without a breakpoint (or with only TTLs this
    mapping does not know, which the provider refuses anyway).

    The longest counts because it is the one still readable: Anthropic requires longer TTLs
    before shorter ones, so after a pause between the two the prefix up to the last 1-hour
    breakpoint is still read, and only a pause longer than the longest TTL leaves nothing to
    read: the server's *TTL expired* cause (docs/analysis.md)."""
    blocks: list[Any] = [{"cache_control": kwargs.get("cache_control")}]
    for name in ("tools", "system"):
        value = kwargs.get(name)
        blocks += value if isinstance(value, list) else []
    messages = kwargs.get("messages")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        blocks += content if isinstance(content, list) else []
    found = [_ttl_of(b.get("cache_control")) for b in blocks if isinstance(b, dict)]
    known = [ttl for ttl in found if ttl is not None]
    return max(known) if known else None


def _tool_line(tool: Any) -> str:
    return canonical_json(_without_cache_control(tool))


def _block_read(block: dict[str, Any]) -> tuple[str, str]:
    """A content block's kind as the parts tell them apart, and its text."""
    kind = block.get("type")
    if kind == "tool_use":
        return "tool_use", canonical_json({"name": block.get("name"), "input": block.get("input")})
    if kind in ("tool_result", "compaction"):
        return kind, text_of(block.get("content"))
    if kind in ("text", None):
        return "text", str(block.get("text", ""))
    if kind in ("thinking", "redacted_thinking"):
        return "thinking", str(block.get("thinking", ""))
    # images, documents, server tool blocks: their JSON without base64 payloads
    return "other", canonical_json({k: v for k, v in block.items() if k not in ("source", "cache_control")})


def _read(obj: Any, read: Callable[[Any], Any], shared: ObjectMemo[Any] | None) -> Any:
    return read(obj) if shared is None else shared.get(obj, read)


def request_parts(kwargs: dict[str, Any], shared: ObjectMemo[Any] | None = None
                  ) -> tuple[list[Part], list[tuple[str, str]]]:
    """The parts and prefix segments of a request's parameters as plain JSON (:meth:`CallRecord.params`);
    ``shared``: what is read of its tools and blocks, remembered (:attr:`CallRecord.shared`)."""
    parts: list[Part] = []
    tools = kwargs.get("tools") or []
    tool_lines = []
    for index, tool in enumerate(tools):
        line = _read(tool, _tool_line, shared)
        tool_lines.append(line)
        parts.append(Part(role="tools", text=line, segment="tools", source=f"tools[{index}]"))
    system = kwargs.get("system")
    system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else (system or [])
    system_lines = []
    for index, block in enumerate(system_blocks):
        text = block.get("text", "") if isinstance(block, dict) else text_of(block)
        system_lines.append(text)
        parts.append(Part(role="system", text=text, segment="system", source=f"system[{index}]"))

    messages = kwargs.get("messages") or []
    message_lines: list[tuple[int, str]] = []
    cached_upto = len(messages) if kwargs.get("cache_control") else 0  # top-level: automatic caching
    first_user = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), -1)
    for m_index, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = str(message.get("role") or "user")
        content = message.get("content")
        made = isinstance(content, str)  # a block made here: nothing to remember it by
        blocks = [{"type": "text", "text": content}] if made else (content or [])
        for b_index, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            if block.get("cache_control"):
                cached_upto = max(cached_upto, m_index + 1)
            source = f"messages[{m_index}].content[{b_index}]"
            kind, text = _read(block, _block_read, None if made else shared)
            if kind == "tool_use":
                parts.append(Part(role="assistant", text=text, group=block.get("id"), source=source))
            elif kind == "tool_result":
                parts.append(Part(role="tool", text=text, group=block.get("tool_use_id"), source=source))
            elif kind == "compaction":
                parts.append(Part(role=role, kind="summary", text=text, source=source))
            elif kind == "text":
                summary = m_index == first_user and summary_strategy(text)
                parts.append(Part(role=role, kind="summary" if summary else "", text=text, source=source))
            elif kind == "thinking":
                parts.append(Part(role=role, kind="history", text=text, source=source))
            else:
                parts.append(Part(role=role, text=text, source=source))
            message_lines.append((m_index, f"{role}: {text}"))
    segments = []
    if tool_lines:
        segments.append(("tools", "\n".join(tool_lines)))
    if system_lines:
        segments.append(("system", "\n".join(system_lines)))
    cached = [line for index, line in message_lines if index < cached_upto]
    if cached_upto and cached:
        segments.append(("messages", "\n".join(cached)))
    return parts, segments


def _from_stream(events: list[Any]) -> dict[str, Any]:
    """Usage, model, stop reason and context management of a streamed message (the usage in
    message_delta events is cumulative: the last value of each field wins)."""
    usage: dict[str, Any] = {}
    out: dict[str, Any] = {"usage": usage, "content": []}
    for event in events:
        kind = field(event, "type")
        if kind == "message_start":
            message = plain(field(event, "message")) or {}
            usage.update({k: v for k, v in (message.get("usage") or {}).items() if v is not None})
            out["model"], out["id"] = message.get("model"), message.get("id")
        elif kind == "message_delta":
            usage.update({k: v for k, v in (plain(field(event, "usage")) or {}).items() if v is not None})
            delta = plain(field(event, "delta")) or {}
            out["stop_reason"] = delta.get("stop_reason") or out.get("stop_reason")
            cm = plain(field(event, "context_management"))
            if cm:
                out["context_management"] = cm
        elif kind == "content_block_start":
            out["content"].append(plain(field(event, "content_block")) or {})
    return out


def _compactions(usage: dict[str, Any]) -> list[Compaction]:
    out = []
    for index, it in enumerate(usage.get("iterations") or []):
        if isinstance(it, dict) and it.get("type") == "compaction":
            out.append(Compaction(id=f"compaction-{index}", strategy="anthropic_compaction", trigger="provider",
                                  tokens_before=int(it.get("input_tokens") or 0),
                                  tokens_after=int(it.get("output_tokens") or 0)))
    return out


def manifest(record: CallRecord) -> Manifest:
    kw = record.params()
    parts, segments = request_parts(kw, record.shared)
    if record.stream_events is not None:
        got = _from_stream(record.stream_events)
    else:
        response = plain(record.response) if record.response is not None else {}
        got = response if isinstance(response, dict) else {}
    usage_raw = got.get("usage") or {}
    warnings = []
    if record.error is not None:
        status = getattr(record.error, "status_code", None)
        warnings.append(f"error: {type(record.error).__name__}" + (f" (HTTP {status})" if status else ""))
    sdk = sys.modules.get("anthropic")
    edits = applied_edits_to_manifest(got.get("context_management")) if got.get("context_management") else []
    compactions = _compactions(usage_raw)
    if any(isinstance(b, dict) and b.get("type") == "compaction" for b in got.get("content") or []) \
            and not compactions:
        warnings.append("the response holds a compaction block")
    m = call_manifest(
        call_id=record.id_for(answer_id(got.get("id"))), run_id=record.run_id, step=record.step,
        model=str(got.get("model") or kw.get("model") or "unknown"), provider="anthropic", agent=record.agent,
        started_at=record.started_at, ended_at=record.ended_at, parts=parts, segments=segments,
        usage=normalize_usage(usage_raw, "anthropic") if usage_raw else None,
        window=record.window, output_reserve=int(kw.get("max_tokens") or 0),
        outcome=Outcome(status="error" if record.error is not None else "ok", finish_reason=got.get("stop_reason")),
        context_edits=edits, evidence_keys=record.evidence or (), include_text=record.include_text,
        warnings=warnings,
        builder=Builder(name="ctxkit.instrument", version=f"anthropic {getattr(sdk, '__version__', '')}".strip()),
    )
    m.compactions = compactions
    m.cache_ttl_seconds = cache_ttl_seconds(kw)
    return m


APIS: dict[str, Adapter] = {MESSAGES: manifest}


# --------------------------------------------------------------------------- #
# The wire, as the proxy reads it


def claims(path: str, headers: Any) -> bool:
    """Is this request for Anthropic's upstream?"""
    return path.startswith(("/v1/messages", "/v1/complete")) or "anthropic-version" in headers


def is_request(params: dict[str, Any]) -> bool:
    """Do these parameters use Anthropic's shapes (a top-level ``system``, ``input_schema``
    tools, ``cache_control`` breakpoints)?"""
    if "system" in params or "cache_control" in params:
        return True
    tools = params.get("tools") or []
    if any(isinstance(t, dict) and "input_schema" in t for t in tools):
        return True
    for entry in params.get("messages") or []:
        content = entry.get("content") if isinstance(entry, dict) else None
        if isinstance(content, list) and any(isinstance(b, dict) and "cache_control" in b for b in content):
            return True
    return False


def recorded(method: str, path: str, query: str) -> str:
    """The recorded API of one of Anthropic's requests, or ``""``."""
    return MESSAGES if method == "POST" and path == "/v1/messages" else ""


with_path = body_as_sent


def streamed(api: str, request: dict[str, Any], path: str) -> bool:
    return bool(request.get("stream"))


def well_formed(request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    return _well_formed(request, FIELDS, ("messages",))


def history(api: str, request: dict[str, Any]) -> list[Any]:
    """The call's history: its ``messages``."""
    return entries_of(request, "messages")


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def message(entry: Any) -> Message:
    if not isinstance(entry, dict):
        return Message(role="", texts=(), says=False)
    content = entry.get("content")
    blocks = _blocks(content)
    texts: list[str] = []
    for block in blocks:
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "compaction":
            inner = block.get("content")
            texts.extend([inner] if isinstance(inner, str) else [
                b["text"] for b in inner if isinstance(b, dict) and isinstance(b.get("text"), str)]
                if isinstance(inner, list) else [])
    compacted = any(b.get("type") == "compaction" for b in blocks)
    return Message(role=str(entry.get("role") or ""), texts=tuple(texts),
                   says=any(b.get("type", "text") in ("text", "input_text") for b in blocks),
                   compaction="anthropic_compaction" if compacted else "")


def _without_cache_control_deep(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control_deep(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control_deep(v) for v in value]
    return value


def normal(entry: Any) -> Any:
    """A history entry as compared from call to call: without its ``cache_control`` markers (an
    agent moves its cache breakpoint to the newest message every turn) and with a string content
    taken as the one text block it means (Claude Code sends its mid-conversation ``system``
    message as a list of one text block, and the next turn as a string)."""
    entry = _without_cache_control_deep(entry)
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        entry = {**entry, "content": [{"type": "text", "text": entry["content"]}]}
    return entry


def read_events(text: str) -> tuple[list[dict[str, Any]], int]:
    """The streamed events: server-sent events."""
    return json_events(text)


def answer_text(response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str:
    """The text blocks (and compaction blocks) the model answered."""
    parts: list[str] = []
    content = (response or {}).get("content")
    for block in content if isinstance(content, list) else []:
        parts.append(block_text(block))
    for event in events or ():
        kind = event.get("type")
        delta = event.get("delta")
        if kind == "content_block_delta" and isinstance(delta, dict) and delta.get("type") == "text_delta":
            parts.append(str(delta.get("text") or ""))
        elif kind == "content_block_start":
            parts.append(block_text(event.get("content_block")))
    return "".join(parts)


def tool_calls(response: dict[str, Any] | None, events: list[dict[str, Any]] | None,
               wanted: Any = None) -> list[ToolCall]:
    """The ``tool_use`` blocks of the answer (``wanted``: only tools of these names), from the
    response or the streamed events (a streamed tool's input arrives as ``input_json_delta``
    pieces, joined here)."""
    out: list[ToolCall] = []
    content = (response or {}).get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_use" \
                and (wanted is None or block.get("name") in wanted):
            out.append(ToolCall(id=str(block.get("id") or ""), name=block.get("name"), arguments=block.get("input")))
    started: dict[Any, dict[str, Any]] = {}
    pieces: dict[Any, list[str]] = {}
    for event in events or ():
        kind, index = event.get("type"), event.get("index")
        block, delta = event.get("content_block"), event.get("delta")
        if kind == "content_block_start" and isinstance(block, dict) and block.get("type") == "tool_use" \
                and (wanted is None or block.get("name") in wanted):
            started[index], pieces[index] = block, []
        elif kind == "content_block_delta" and index in started and isinstance(delta, dict) \
                and isinstance(delta.get("partial_json"), str):
            pieces[index].append(delta["partial_json"])
        elif kind == "content_block_stop" and index in started:
            block = started.pop(index)
            out.append(ToolCall(id=str(block.get("id") or ""), name=block.get("name"),
                                arguments="".join(pieces.pop(index)) or block.get("input")))
    return out


def previous(request: dict[str, Any]) -> str:
    """The earlier response a call continues by reference: none in this API."""
    return ""


def response_id(api: str, response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str:
    """The message's id (``msg_…``), from the response or the stream's ``message_start``."""
    if response is not None:
        return answer_id(response.get("id"))
    for event in events or ():
        message = event.get("message")
        if event.get("type") == "message_start" and isinstance(message, dict):
            return answer_id(message.get("id"))
    return ""


def error_type(payload: Any) -> str:
    """``{"type": "error", "error": {"type": ...}}``."""
    return nested_error_type(payload)


def stream_error(events: list[dict[str, Any]]) -> str:
    """An ``error`` event in the stream."""
    for event in events:
        if event.get("type") == "error":
            return nested_error_type(event) or "error"
    return ""


def error_body(message: str) -> bytes:
    """An error in Anthropic's shape (what the proxy answers when the upstream cannot be reached)."""
    return error_json({"type": "error", "error": {"type": "api_error", "message": message}})


def tool_name(tool: Any) -> str | None:
    """The name of a tool definition."""
    name = tool.get("name") if isinstance(tool, dict) else None
    return name if isinstance(name, str) and name else None


def sdk_resources(client: Any) -> list[tuple[str, Any, tuple[str, ...], Adapter, tuple[str, Adapter] | None]]:
    """The resources of an ``anthropic`` client that make model calls, the paths of their calls
    and their mapping (for ``ctxkit.instrument``)."""
    out: list[tuple[str, Any, tuple[str, ...], Adapter, tuple[str, Adapter] | None]] = [
        ("messages", client.messages, ("/v1/messages",), manifest, None)]
    beta = getattr(getattr(client, "beta", None), "messages", None)
    if beta is not None:
        out.append(("beta.messages", beta, ("/v1/messages?beta=true", "/v1/messages"), manifest, None))
    return out
