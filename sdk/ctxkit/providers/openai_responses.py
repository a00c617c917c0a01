"""OpenAI Responses (``POST /v1/responses``, and ``GET /v1/responses/{id}?stream=true`` resuming
one): a recorded call as a manifest, and its wire as the proxy reads it (mostly shared with
ctxkit.providers.openai_chat: the same upstream, errors and events).

Usage: ``input_tokens`` already includes the cached tokens. A resumed Responses stream
(``responses.stream(response_id=...)``) has no request body: it is recorded from the response
the events carry (model, instructions, tools, usage, status).
"""

from __future__ import annotations

from typing import Any

from ctxkit.agents import summary_strategy
from ctxkit.context.layout import canonical_json
from ctxkit.manifest import Manifest
from ctxkit.providers.call import Adapter, CallRecord, field, plain
from ctxkit.providers.common import ToolCall, answer_id, block_text, canonical_arguments, entries_of
from ctxkit.providers.common import well_formed as _well_formed
from ctxkit.providers.openai_chat import (
    HOOK,
    SDK,
    SYSTEM_ROLES,
    UPSTREAM,
    build,
    claims,
    content_text,
    error_body,
    error_type,
    message,
    normal,
    read_events,
    segments,
    stream_error,
    tool_name,
    tools_parts,
    with_path,
)
from ctxkit.record.call_items import Part, text_of

__all__ = ["NAME", "UPSTREAM", "SDK", "APIS", "claims", "recorded", "streamed", "well_formed", "history", "message",
           "normal", "read_events", "answer_text", "tool_calls", "response_id", "error_type", "stream_error",
           "error_body", "tool_name", "sdk_resources", "responses_parts", "responses_manifest", "resumed_manifest",
           "previous", "is_request", "with_path", "HOOK", "RESPONSES", "RESUMED_API", "FIELDS"]

NAME = "openai_responses"
RESPONSES = "openai.responses"
RESUMED_API = "openai.responses.resumed"
FIELDS: dict[str, tuple[type, ...]] = {"model": (str,), "max_output_tokens": (int, float), "tools": (list,),
                                       "input": (str, list), "instructions": (str,)}


def responses_parts(kwargs: dict[str, Any]) -> tuple[list[Part], list[tuple[str, str]]]:
    parts: list[Part] = []
    system: list[str] = []
    if kwargs.get("instructions"):
        system.append(str(kwargs["instructions"]))
        parts.append(Part(role="system", text=system[0], segment="system", source="instructions"))
    tools = tools_parts(kwargs, parts)
    given = plain(kwargs.get("input"))
    entries = [{"role": "user", "content": given}] if isinstance(given, str) else (given or [])
    entries = [e for e in entries if isinstance(e, dict)]
    last_user = max((i for i, e in enumerate(entries) if e.get("role") == "user"), default=len(entries))
    first_user = next((i for i, e in enumerate(entries) if e.get("role") == "user"), -1)
    history: list[str] = []
    for index, e in enumerate(entries):
        source, kind = f"input[{index}]", e.get("type")
        if kind == "function_call":
            text = canonical_json({"name": e.get("name"), "arguments": canonical_arguments(e.get("arguments"))})
            parts.append(Part(role="assistant", text=text, group=e.get("call_id"), source=source))
        elif kind == "custom_tool_call":  # a free-form tool's call (Codex's apply_patch): its input as sent
            text = canonical_json({"name": e.get("name"), "input": e.get("input")})
            parts.append(Part(role="assistant", text=text, group=e.get("call_id"), source=source))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            text = text_of(e.get("output"))
            parts.append(Part(role="tool", text=text, group=e.get("call_id"), source=source))
        elif kind == "compaction":
            text = text_of(e.get("encrypted_content") or e.get("summary") or "")
            parts.append(Part(role="assistant", kind="summary", text=text, source=source))
        elif kind == "reasoning":  # the model's reasoning sent back: its summary (the rest is encrypted)
            text = text_of(e.get("summary") or e.get("content") or "")
            parts.append(Part(role="assistant", kind="history", text=text, source=source))
        elif kind not in (None, "message") and not e.get("role"):  # another item the model or a tool made
            text = canonical_json({k: v for k, v in e.items() if k not in ("id", "status", "encrypted_content")})
            output = str(kind).endswith("_output")
            parts.append(Part(role="tool" if output else "assistant", text=text,
                              group=e.get("call_id") if isinstance(e.get("call_id"), str) else None, source=source))
        else:
            role = str(e.get("role") or "user")
            text = content_text(e.get("content"))
            if role in SYSTEM_ROLES:
                system.append(text)
                parts.append(Part(role="system", text=text, segment="system", source=source))
                continue
            summary = role == "user" and summary_strategy(text, first=index == first_user)
            parts.append(Part(role=role, kind="summary" if summary else "", text=text, source=source))
        if index < last_user:
            history.append(f"{e.get('role') or kind}: {text}")
    return parts, segments(system, tools, history)


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
    return build(record, parts, segments, model=response.get("model"), usage=response.get("usage"),
                  flavour="openai_responses", finish=finish, reserve=kw.get("max_output_tokens"),
                  answered=response.get("id"))


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
    record.id_for("")  # not the response's id: the call that made the response has it
    m = responses_manifest(record)
    m.warnings = [*m.warnings, RESUMED.format(id=response.get("id") or "?")]
    return m


APIS: dict[str, Adapter] = {RESPONSES: responses_manifest, RESUMED_API: resumed_manifest}


def is_request(params: dict[str, Any]) -> bool:
    """Are these a Responses request's parameters (rather than a Chat Completion's)?"""
    return "input" in params or "instructions" in params


def recorded(method: str, path: str, query: str) -> str:
    if method == "POST" and path == "/v1/responses":
        return RESPONSES
    if method == "GET" and path.startswith("/v1/responses/") and "/" not in path[len("/v1/responses/"):] \
            and "stream=true" in query.lower():
        return RESUMED_API
    return ""


def streamed(api: str, request: dict[str, Any], path: str) -> bool:
    return bool(request.get("stream")) or api == RESUMED_API


def well_formed(request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    return _well_formed(request, FIELDS, ("input",))


def history(api: str, request: dict[str, Any]) -> list[Any]:
    """The call's history: its ``input``."""
    return entries_of(request, "input")


def answer_text(response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str:
    """The output text the model answered, from the response or the streamed deltas."""
    parts: list[str] = []
    output = (response or {}).get("output")
    for entry in output if isinstance(output, list) else []:
        content = entry.get("content") if isinstance(entry, dict) else None
        for block in content if isinstance(content, list) else []:
            parts.append(block_text(block))
    for event in events or ():
        delta = event.get("delta")
        if event.get("type") == "response.output_text.delta" and isinstance(delta, str):
            parts.append(delta)
    return "".join(parts)


def tool_calls(response: dict[str, Any] | None, events: list[dict[str, Any]] | None,
               wanted: Any = None) -> list[ToolCall]:
    """Not read from Responses' answers (no agent starts sub-agents through them yet)."""
    return []


def response_id(api: str, response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str:
    """The id the response answered with (``resp_…``; a later call's ``previous_response_id``).
    A resumed stream has none of its own: it reads again a response recorded under that id."""
    if api == RESUMED_API:
        return ""
    if response is not None:
        return answer_id(response.get("id"))
    for event in events or ():
        inner = event.get("response")
        if isinstance(inner, dict) and inner.get("id"):
            return answer_id(inner["id"])
    return ""


def previous(request: dict[str, Any]) -> str:
    """The response a call continues (``previous_response_id``), ``""`` without one."""
    value = request.get("previous_response_id")
    return value if isinstance(value, str) else ""


def sdk_resources(client: Any) -> list[tuple[str, Any, tuple[str, ...], Adapter, tuple[str, Adapter] | None]]:
    """``responses`` of an ``openai`` client, and its resumed streams (for ``ctxkit.instrument``)."""
    return [("responses", client.responses, ("/responses",), responses_manifest, ("/responses/", resumed_manifest))]
