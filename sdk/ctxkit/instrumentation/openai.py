"""OpenAI Chat Completions and Responses: a recorded call as a manifest.

OpenAI caches prompt prefixes automatically (from 1024 tokens): the prefix segments are the
system / developer instructions, the tool definitions, and the conversation before the last
user turn (what the next call repeats). Usage: ``prompt_tokens`` / ``input_tokens`` already
include the cached tokens. A streamed Chat Completion reports usage only when the agent asks
for it (``stream_options={"include_usage": True}``); instrument() does not change the request.
A resumed Responses stream (``responses.stream(response_id=...)``) has no request body: it is
recorded from the response the events carry (model, instructions, tools, usage, status).
"""

from __future__ import annotations

import sys
from typing import Any

from ctxkit.context.layout import canonical_json
from ctxkit.instrumentation.recorder import CallRecord
from ctxkit.instrumentation.wrap import field, plain
from ctxkit.manifest import Builder, Manifest, Outcome
from ctxkit.record.call_items import Part, call_manifest, text_of
from ctxkit.record.summaries import summary_strategy
from ctxkit.record.usage import normalize_usage

_SYSTEM_ROLES = ("system", "developer")


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) and "text" in p else canonical_json(p)
                         for p in content)
    return text_of(content)


def _tools(kwargs: dict[str, Any], parts: list[Part]) -> str:
    lines = []
    for index, tool in enumerate(plain(kwargs.get("tools")) or []):
        line = canonical_json(tool)
        lines.append(line)
        parts.append(Part(role="tools", text=line, segment="tools", source=f"tools[{index}]"))
    return "\n".join(lines)


def _segments(system: list[str], tools: str, history: list[str]) -> list[tuple[str, str]]:
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
    tools = _tools(kwargs, parts)
    messages = [m for m in (plain(kwargs.get("messages")) or []) if isinstance(m, dict)]
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages))
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), -1)
    history: list[str] = []
    for index, m in enumerate(messages):
        role, source = str(m.get("role") or "user"), f"messages[{index}]"
        text = _content_text(m.get("content"))
        if role in _SYSTEM_ROLES:
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
            parts.append(Part(role="assistant", text=canonical_json({"name": fn.get("name"),
                                                                     "arguments": fn.get("arguments")}),
                              group=call.get("id"), source=f"{source}.tool_calls[{c_index}]"))
        if index < last_user:
            history.append(f"{role}: {text}")
    return parts, _segments(system, tools, history)


def responses_parts(kwargs: dict[str, Any]) -> tuple[list[Part], list[tuple[str, str]]]:
    parts: list[Part] = []
    system: list[str] = []
    if kwargs.get("instructions"):
        system.append(str(kwargs["instructions"]))
        parts.append(Part(role="system", text=system[0], segment="system", source="instructions"))
    tools = _tools(kwargs, parts)
    given = plain(kwargs.get("input"))
    entries = [{"role": "user", "content": given}] if isinstance(given, str) else (given or [])
    entries = [e for e in entries if isinstance(e, dict)]
    last_user = max((i for i, e in enumerate(entries) if e.get("role") == "user"), default=len(entries))
    first_user = next((i for i, e in enumerate(entries) if e.get("role") == "user"), -1)
    history: list[str] = []
    for index, e in enumerate(entries):
        source, kind = f"input[{index}]", e.get("type")
        if kind == "function_call":
            text = canonical_json({"name": e.get("name"), "arguments": e.get("arguments")})
            parts.append(Part(role="assistant", text=text, group=e.get("call_id"), source=source))
        elif kind == "function_call_output":
            text = text_of(e.get("output"))
            parts.append(Part(role="tool", text=text, group=e.get("call_id"), source=source))
        elif kind == "compaction":
            text = text_of(e.get("encrypted_content") or e.get("summary") or "")
            parts.append(Part(role="assistant", kind="summary", text=text, source=source))
        else:
            role = str(e.get("role") or "user")
            text = _content_text(e.get("content"))
            if role in _SYSTEM_ROLES:
                system.append(text)
                parts.append(Part(role="system", text=text, segment="system", source=source))
                continue
            summary = index == first_user and summary_strategy(text)
            parts.append(Part(role=role, kind="summary" if summary else "", text=text, source=source))
        if index < last_user:
            history.append(f"{e.get('role') or kind}: {text}")
    return parts, _segments(system, tools, history)


def _error_warning(error: BaseException | None) -> list[str]:
    if error is None:
        return []
    status = getattr(error, "status_code", None)
    return [f"error: {type(error).__name__}" + (f" (HTTP {status})" if status else "")]


def _build(record: CallRecord, parts: list[Part], segments: list[tuple[str, str]], *, model: Any,
           usage: Any, flavour: str, finish: Any, reserve: Any) -> Manifest:
    sdk = sys.modules.get("openai")
    return call_manifest(
        call_id=record.call_id, run_id=record.run_id, step=record.step,
        model=str(model or record.kwargs.get("model") or "unknown"), provider="openai", agent=record.agent,
        started_at=record.started_at, ended_at=record.ended_at, parts=parts, segments=segments,
        usage=normalize_usage(usage, flavour) if usage else None,
        window=record.window, output_reserve=int(reserve or 0),
        outcome=Outcome(status="error" if record.error is not None else "ok",
                        finish_reason=str(finish) if finish else None),
        evidence_keys=record.evidence or (), include_text=record.include_text,
        warnings=_error_warning(record.error),
        builder=Builder(name="ctxkit.instrument", version=f"openai {getattr(sdk, '__version__', '')}".strip()),
    )


def chat_manifest(record: CallRecord) -> Manifest:
    kw = record.kwargs
    parts, segments = chat_parts(kw)
    model, usage, finish = None, None, None
    if record.stream_events is not None:
        for chunk in record.stream_events:
            c = plain(chunk) or {}
            model = c.get("model") or model
            usage = c.get("usage") or usage
            for choice in c.get("choices") or []:
                finish = choice.get("finish_reason") or finish
    elif record.response is not None:
        r = plain(record.response) or {}
        model, usage = r.get("model"), r.get("usage")
        finish = next((c.get("finish_reason") for c in r.get("choices") or []), None)
    return _build(record, parts, segments, model=model, usage=usage, flavour="openai_chat", finish=finish,
                  reserve=kw.get("max_completion_tokens") or kw.get("max_tokens"))


def responses_manifest(record: CallRecord) -> Manifest:
    kw = record.kwargs
    parts, segments = responses_parts(kw)
    response: dict[str, Any] = {}
    if record.stream_events is not None:
        for event in record.stream_events:
            if field(event, "type") in ("response.completed", "response.incomplete", "response.failed"):
                response = plain(field(event, "response")) or {}
    elif record.response is not None:
        response = plain(record.response) or {}
    finish = response.get("status")
    details = response.get("incomplete_details") or {}
    if isinstance(details, dict) and details.get("reason"):
        finish = details["reason"]
    return _build(record, parts, segments, model=response.get("model"), usage=response.get("usage"),
                  flavour="openai_responses", finish=finish, reserve=kw.get("max_output_tokens"))


RESUMED = ("a resumed stream of response {id}: its input is not known here, only the response's own "
           "instructions and tools")


def resumed_manifest(record: CallRecord) -> Manifest:
    """``responses.stream(response_id=...)`` / ``responses.retrieve(id, stream=True)``: the
    request was made earlier (perhaps by another process); what it sent beyond the instructions
    and tools the response echoes is unknown. Usage is the response's own, as its events report it."""
    response: dict[str, Any] = {}
    for event in record.stream_events or ():
        got = field(event, "response")
        if got is not None:
            response = plain(got) or {}
    record.kwargs = {k: response[k] for k in ("model", "instructions", "tools", "max_output_tokens")
                     if response.get(k)}
    m = responses_manifest(record)
    m.warnings = [*m.warnings, RESUMED.format(id=response.get("id") or "?")]
    return m
