"""OpenAI Chat Completions (``POST /v1/chat/completions``): a recorded call as a manifest, and its
wire as the proxy reads it. OpenAI's requests go to the OpenAI upstream: every request no other
provider claims does.

OpenAI caches prompt prefixes automatically (from 1024 tokens): the prefix segments are the
system / developer instructions, the tool definitions, and the conversation before the last
user turn (what the next call repeats). Usage: ``prompt_tokens`` already includes the cached
tokens. A streamed Chat Completion reports usage only when the agent asks for it
(``stream_options={"include_usage": True}``); instrument() does not change the request.
"""

from __future__ import annotations

import sys
from typing import Any

from ctxkit.agents import summary_strategy
from ctxkit.context.layout import canonical_json
from ctxkit.manifest import Builder, Manifest, Outcome
from ctxkit.providers.call import Adapter, CallRecord, plain
from ctxkit.providers.common import (
    Message,
    ToolCall,
    answer_id,
    body_as_sent,
    canonical_arguments,
    entries_of,
    error_json,
    nested_error_type,
)
from ctxkit.providers.common import well_formed as _well_formed
from ctxkit.providers.sse import json_events
from ctxkit.record.call_items import Part, call_manifest, text_of
from ctxkit.record.usage import normalize_usage

NAME = "openai_chat"
UPSTREAM = "openai"
HOOK = "post"  # ctxkit.instrument hooks each resource's _post
SDK = "openai"
CHAT = "openai.chat"
FIELDS: dict[str, tuple[type, ...]] = {"model": (str,), "max_tokens": (int, float),
                                       "max_completion_tokens": (int, float), "tools": (list,), "messages": (list,)}
SYSTEM_ROLES = ("system", "developer")


def content_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) and "text" in p else canonical_json(p)
                         for p in content)
    return text_of(content)


def tools_parts(kwargs: dict[str, Any], parts: list[Part]) -> str:
    lines = []
    for index, tool in enumerate(plain(kwargs.get("tools")) or []):
        line = canonical_json(tool)
        lines.append(line)
        parts.append(Part(role="tools", text=line, segment="tools", source=f"tools[{index}]"))
    return "\n".join(lines)


def segments(system: list[str], tools: str, history: list[str]) -> list[tuple[str, str]]:
    segments = []
    if system:
        segments.append(("system", "\n".join(system)))
    if tools:
        segments.append(("tools", tools))
    if history:
        segments.append(("messages", "\n".join(history)))
    return segments


def chat_parts(kwargs: dict[str, Any]) -> tuple[list[Part], list[tuple[str, str]]]:
    parts: list[Part] = []
    system: list[str] = []
    tools = tools_parts(kwargs, parts)
    messages = [m for m in (plain(kwargs.get("messages")) or []) if isinstance(m, dict)]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages))
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), -1)
    history: list[str] = []
    for index, m in enumerate(messages):
        role, source = str(m.get("role") or "user"), f"messages[{index}]"
        text = content_text(m.get("content"))
        if role in SYSTEM_ROLES:
            system.append(text)
            parts.append(Part(role="system", text=text, segment="system", source=source))
            continue
        if role == "tool":
            parts.append(Part(role="tool", text=text, group=m.get("tool_call_id"), source=source))
        elif text:
            summary = index == first_user and summary_strategy(text)
            parts.append(Part(role=role, kind="summary" if summary else "", text=text, source=source))
        for c_index, call in enumerate(m.get("tool_calls") or []):
            fn = call.get("function") or {}
            key = canonical_json({"name": fn.get("name"), "arguments": canonical_arguments(fn.get("arguments"))})
            parts.append(Part(role="assistant", text=key, group=call.get("id"),
                              source=f"{source}.tool_calls[{c_index}]"))
        if index < last_user:
            history.append(f"{role}: {text}")
    return parts, segments(system, tools, history)


def error_warning(error: BaseException | None) -> list[str]:
    if error is None:
        return []
    status = getattr(error, "status_code", None)
    return [f"error: {type(error).__name__}" + (f" (HTTP {status})" if status else "")]


def build(record: CallRecord, parts: list[Part], segments: list[tuple[str, str]], *, model: Any,
           usage: Any, flavour: str, finish: Any, reserve: Any, answered: Any = None) -> Manifest:
    """The manifest of an OpenAI call (``answered``: the id of its answer, its call id)."""
    sdk = sys.modules.get("openai")
    return call_manifest(
        call_id=record.id_for(answer_id(answered)), run_id=record.run_id, step=record.step,
        model=str(model or record.kwargs.get("model") or "unknown"), provider="openai", agent=record.agent,
        started_at=record.started_at, ended_at=record.ended_at, parts=parts, segments=segments,
        usage=normalize_usage(usage, flavour) if usage else None,
        window=record.window, output_reserve=int(reserve or 0),
        outcome=Outcome(status="error" if record.error is not None else "ok",
                        finish_reason=str(finish) if finish else None),
        evidence_keys=record.evidence or (), include_text=record.include_text,
        warnings=error_warning(record.error),
        builder=Builder(name="ctxkit.instrument", version=f"openai {getattr(sdk, '__version__', '')}".strip()),
    )


def chat_manifest(record: CallRecord) -> Manifest:
    kw = record.kwargs
    parts, segments = chat_parts(kw)
    model, usage, finish, answered = None, None, None, None
    if record.stream_events is not None:
        for chunk in record.stream_events:
            c = plain(chunk) or {}
            model, answered = c.get("model") or model, answered or c.get("id")
            usage = c.get("usage") or usage
            for choice in c.get("choices") or []:
                finish = choice.get("finish_reason") or finish
    elif record.response is not None:
        r = plain(record.response) or {}
        model, usage, answered = r.get("model"), r.get("usage"), r.get("id")
        finish = next((c.get("finish_reason") for c in r.get("choices") or []), None)
    return build(record, parts, segments, model=model, usage=usage, flavour="openai_chat", finish=finish,
                  reserve=kw.get("max_completion_tokens") or kw.get("max_tokens"), answered=answered)


APIS: dict[str, Adapter] = {CHAT: chat_manifest}


# --------------------------------------------------------------------------- #
# The wire, as the proxy reads it (shared with ctxkit.providers.openai_responses)


def claims(path: str, headers: Any) -> bool:
    """OpenAI's upstream takes what no other provider claims."""
    return False


def recorded(method: str, path: str, query: str) -> str:
    return CHAT if method == "POST" and path == "/v1/chat/completions" else ""


with_path = body_as_sent


def streamed(api: str, request: dict[str, Any], path: str) -> bool:
    return bool(request.get("stream"))


def well_formed(request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    return _well_formed(request, FIELDS, ("messages",))


def history(api: str, request: dict[str, Any]) -> list[Any]:
    """The call's history: its ``messages``."""
    return entries_of(request, "messages")


def message(entry: Any) -> Message:
    """A message or Responses input item: its texts (``text`` / ``input_text`` parts), and
    OpenAI Responses' ``compaction`` item."""
    if not isinstance(entry, dict):
        return Message(role="", texts=(), says=False)
    content = entry.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else \
        [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    return Message(role=str(entry.get("role") or ""),
                   texts=tuple(b["text"] for b in blocks if isinstance(b.get("text"), str)),
                   says=any(b.get("type", "text") in ("text", "input_text") for b in blocks),
                   compaction="openai_compaction" if entry.get("type") == "compaction" else "")


def normal(entry: Any) -> Any:
    """A history entry as compared from call to call: a string content as the one text block it means."""
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        entry = {**entry, "content": [{"type": "text", "text": entry["content"]}]}
    return entry


def read_events(text: str) -> tuple[list[dict[str, Any]], int]:
    """The streamed events: server-sent events (the closing ``[DONE]`` is not one)."""
    return json_events(text)


def answer_text(response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str:
    """The message the model answered, from the response or the streamed chunks."""
    parts: list[str] = []
    choices = (response or {}).get("choices")
    for choice in choices if isinstance(choices, list) else []:
        answer = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(answer, dict) and isinstance(answer.get("content"), str):
            parts.append(answer["content"])
    for event in events or ():
        if event.get("type") is None and isinstance(event.get("choices"), list):
            for choice in event["choices"]:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    parts.append(delta["content"])
    return "".join(parts)


def tool_calls(response: dict[str, Any] | None, events: list[dict[str, Any]] | None,
               wanted: Any = None) -> list[ToolCall]:
    """Not read from OpenAI's answers (no agent starts sub-agents through them yet)."""
    return []


def previous(request: dict[str, Any]) -> str:
    """The earlier response a call continues by reference: none in this API."""
    return ""


def response_id(api: str, response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str:
    """The completion's id (``chatcmpl-…``), from the response or its first streamed chunk that has one."""
    if response is not None:
        return answer_id(response.get("id"))
    return next((answer_id(event["id"]) for event in events or () if event.get("id")), "")


def error_type(payload: Any) -> str:
    """``{"error": {"type"/"code": ...}}``."""
    return nested_error_type(payload)


def stream_error(events: list[dict[str, Any]]) -> str:
    """A chunk with an ``error``, Responses' ``error`` / ``response.failed`` events."""
    for event in events:
        kind = event.get("type")
        if kind == "error" or (kind is None and "error" in event):
            return nested_error_type(event) or "error"
        if kind == "response.failed":
            error = (event.get("response") or {}).get("error") or {}
            return str(error.get("code") or "response.failed") if isinstance(error, dict) else "response.failed"
    return ""


def error_body(message: str) -> bytes:
    """An error in OpenAI's shape (what the proxy answers when the upstream cannot be reached)."""
    return error_json({"error": {"message": message, "type": "server_error", "param": None,
                                 "code": "proxy_upstream_error"}})


def tool_name(tool: Any) -> str | None:
    """The name of a tool definition: ``{"type": "function", "function": {"name": ...}}`` or
    Responses' flat ``{"type": "function", "name": ...}``."""
    if not isinstance(tool, dict):
        return None
    inner = tool.get("function")
    name = inner.get("name") if isinstance(inner, dict) else tool.get("name")
    return name if isinstance(name, str) and name else None


def sdk_resources(client: Any) -> list[tuple[str, Any, tuple[str, ...], Adapter, tuple[str, Adapter] | None]]:
    """``chat.completions`` of an ``openai`` client (for ``ctxkit.instrument``)."""
    return [("chat.completions", client.chat.completions, ("/chat/completions",), chat_manifest, None)]
