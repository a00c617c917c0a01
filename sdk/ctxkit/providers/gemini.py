"""The Gemini API (``generateContent``, ``streamGenerateContent``): routing, a call's request,
response or stream as a manifest, its answer, tool calls and errors as the proxy reads them.

Routing: a request is Gemini's when its path is under ``/v1beta/``, ``/v1alpha/`` or
``/upload/``, or under ``/v1/`` naming a method (``/v1/models/<model>:<method>``), or it
carries ``x-goog-api-key`` / ``x-goog-api-client`` (the Google GenAI SDKs send them). Recorded:
``POST /{v1,v1beta,v1alpha}/models/<model>:generateContent`` and ``:streamGenerateContent``
(server-sent events with ``?alt=sse``, a JSON array without); ``countTokens`` and everything else
are forwarded unrecorded. The model and the streaming switch are in the URL, not the body: the
mapping reads them from the path (:func:`with_path`). The key (``x-goog-api-key`` or ``?key=``
in the URL) is forwarded, never recorded.

Items: each part of ``systemInstruction`` is ``system``; each function declaration of ``tools``
is one ``tools`` item (its canonical JSON, so its name reads as any provider's tool), other
tools (``googleSearch``, ``codeExecution``, ...) one item each; ``cachedContent`` is named (an
item without text: the cached content's tokens are in usage's cache reads); ``contents``: text
parts by role (``model`` is the assistant; thoughts are history), ``functionCall`` and
``functionResponse`` share a group (their ``id``, else the n-th call of a name with the n-th
response of that name), inline data is sized, never stored. Prefix segments in Gemini's cache
order: system instruction, tools, the conversation before the last user turn. Usage:
``usageMetadata`` through ctxkit.record.usage (``promptTokenCount`` includes
``cachedContentTokenCount``, the cache read; ``thoughtsTokenCount`` is reasoning;
``toolUsePromptTokenCount`` is input).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sys
from typing import Any

from ctxkit.agents import summary_strategy
from ctxkit.context.layout import canonical_json
from ctxkit.manifest import Builder, Manifest, Outcome
from ctxkit.providers.call import Adapter, CallRecord, plain
from ctxkit.providers.common import Message, ToolCall, answer_id, error_json
from ctxkit.providers.common import well_formed as _well_formed
from ctxkit.providers.sse import json_events
from ctxkit.record.call_items import Part, call_manifest, text_of
from ctxkit.record.usage import normalize_usage

NAME = "gemini"
UPSTREAM = "gemini"
SDK = "google.genai"
HOOK = "api_client"  # ctxkit.instrument hooks the client's API client
GENERATE = "gemini.generate"
STREAM = "gemini.stream"
FIELDS: dict[str, tuple[type, ...]] = {"model": (str,), "contents": (list,), "systemInstruction": (dict, str),
                                       "tools": (list,), "cachedContent": (str,), "generationConfig": (dict,)}
_METHOD = re.compile(r"\A/(?:v1|v1beta|v1alpha)/(models/[^/:]+):(generateContent|streamGenerateContent)\Z")
_GEMINI_PATHS = ("/v1beta/", "/v1alpha/", "/upload/")
_GEMINI_HEADERS = ("x-goog-api-key", "x-goog-api-client")


# --------------------------------------------------------------------------- #
# A request as items


def _system_parts(system: Any) -> list[Any]:
    if isinstance(system, str):
        return [{"text": system}]
    parts = system.get("parts") if isinstance(system, dict) else None
    return parts if isinstance(parts, list) else []


def _inline(data: Any) -> str:
    """Inline data sized, not stored: its MIME type and its decoded size in bytes."""
    info = data if isinstance(data, dict) else {}
    raw = info.get("data")
    size = 0
    if isinstance(raw, str):
        try:
            size = len(base64.b64decode(raw, validate=False))
        except (binascii.Error, ValueError):
            size = len(raw)
    mime = info.get("mimeType") or info.get("mime_type")  # the Python SDK leaves the blob's keys as it got them
    return canonical_json({"inlineData": {"mimeType": mime, "bytes": size}})


def request_parts(kwargs: dict[str, Any]) -> tuple[list[Part], list[tuple[str, str]]]:
    parts: list[Part] = []
    system_lines: list[str] = []
    for index, part in enumerate(_system_parts(plain(kwargs.get("systemInstruction")))):
        text = part.get("text", "") if isinstance(part, dict) else text_of(part)
        text = text if isinstance(text, str) else text_of(text)
        system_lines.append(text)
        parts.append(Part(role="system", text=text, segment="system", source=f"systemInstruction.parts[{index}]"))
    tool_lines: list[str] = []
    for t_index, tool in enumerate(plain(kwargs.get("tools")) or []):
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        if isinstance(declarations, list):
            for f_index, declaration in enumerate(declarations):
                line = canonical_json(declaration)
                tool_lines.append(line)
                parts.append(Part(role="tools", text=line, segment="tools",
                                  source=f"tools[{t_index}].functionDeclarations[{f_index}]"))
            rest = {k: v for k, v in tool.items() if k != "functionDeclarations"} if isinstance(tool, dict) else {}
            if not rest:
                continue
            tool = rest
        line = canonical_json(tool)
        tool_lines.append(line)
        parts.append(Part(role="tools", text=line, segment="tools", source=f"tools[{t_index}]"))
    cached = kwargs.get("cachedContent")
    if isinstance(cached, str) and cached:
        parts.append(Part(role="system", kind="other", text="", source="cachedContent", ref=cached))

    contents = [c for c in plain(kwargs.get("contents")) or [] if isinstance(c, dict)]
    users = [i for i, c in enumerate(contents) if c.get("role", "user") == "user"
             and any(isinstance(p, dict) and "text" in p for p in c.get("parts") or [])]
    first_user, last_user = (users[0], users[-1]) if users else (-1, len(contents))
    calls: dict[str, int] = {}
    answers: dict[str, int] = {}
    history: list[str] = []
    for c_index, content in enumerate(contents):
        role = "assistant" if content.get("role") == "model" else "user"
        for p_index, part in enumerate(content.get("parts") or []):
            if not isinstance(part, dict):
                continue
            source = f"contents[{c_index}].parts[{p_index}]"
            if isinstance(part.get("functionCall"), dict):
                call = part["functionCall"]
                name = str(call.get("name") or "")
                calls[name] = calls.get(name, 0) + 1
                group = str(call.get("id") or f"{name}#{calls[name]}")
                text = canonical_json({"name": call.get("name"), "args": call.get("args")})
                parts.append(Part(role="assistant", text=text, group=group, source=source))
            elif isinstance(part.get("functionResponse"), dict):
                answer = part["functionResponse"]
                name = str(answer.get("name") or "")
                answers[name] = answers.get(name, 0) + 1
                group = str(answer.get("id") or f"{name}#{answers[name]}")
                text = text_of(answer.get("response"))
                parts.append(Part(role="tool", text=text, group=group, source=source))
            elif "inlineData" in part:
                text = _inline(part.get("inlineData"))
                parts.append(Part(role=role, text=text, source=source))
            elif isinstance(part.get("text"), str):
                text = part["text"]
                if part.get("thought"):
                    parts.append(Part(role=role, kind="history", text=text, source=source))
                else:
                    summary = c_index == first_user and summary_strategy(text)
                    parts.append(Part(role=role, kind="summary" if summary else "", text=text, source=source))
            else:  # fileData, executableCode, codeExecutionResult, ...: their JSON
                text = canonical_json({k: v for k, v in part.items() if k != "thoughtSignature"})
                parts.append(Part(role=role, text=text, source=source))
            if c_index < last_user:
                history.append(f"{content.get('role') or 'user'}: {text}")
    segments = []
    if system_lines:
        segments.append(("system", "\n".join(system_lines)))
    if tool_lines:
        segments.append(("tools", "\n".join(tool_lines)))
    if history:
        segments.append(("messages", "\n".join(history)))
    return parts, segments


# --------------------------------------------------------------------------- #
# A response or stream


def _candidate(response: Any) -> dict[str, Any]:
    candidates = response.get("candidates") if isinstance(response, dict) else None
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    return first if isinstance(first, dict) else {}


def _answer_parts(response: Any) -> list[dict[str, Any]]:
    content = _candidate(response).get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _decoded(value: Any) -> Any:
    """A response or chunk: parsed JSON, an SDK object, or the body text an SDK read (decoded here)."""
    if isinstance(value, str | bytes):
        try:
            return json.loads(value) if value else {}
        except ValueError:
            return {}
    return plain(value) or {}


def _summary(record: CallRecord) -> dict[str, Any]:
    """Model, usage and finish of the response, or of the streamed chunks (usage is cumulative:
    the last chunk's wins)."""
    chunks = [_decoded(e) for e in record.stream_events] if record.stream_events is not None else \
        [_decoded(record.response)] if record.response is not None else []
    out: dict[str, Any] = {}
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        usage = chunk.get("usageMetadata") or chunk.get("usage_metadata")
        if isinstance(usage, dict) and usage:
            out["usage"] = usage
        model = chunk.get("modelVersion") or chunk.get("model_version")
        if model:
            out["model"] = model
        finish = _candidate(chunk).get("finishReason") or _candidate(chunk).get("finish_reason")
        if finish:
            out["finish"] = finish
        out["id"] = out.get("id") or chunk.get("responseId") or chunk.get("response_id")
    return out


def manifest(record: CallRecord) -> Manifest:
    kw = record.kwargs
    parts, segments = request_parts(kw)
    got = _summary(record)
    warnings = []
    if record.error is not None:
        status = getattr(record.error, "status_code", None) or getattr(record.error, "code", None)
        warnings.append(f"error: {type(record.error).__name__}" + (f" (HTTP {status})" if status else ""))
    config = kw.get("generationConfig") if isinstance(kw.get("generationConfig"), dict) else {}
    sdk = sys.modules.get("google.genai")
    model = str(kw.get("model") or got.get("model") or "unknown").removeprefix("models/")
    return call_manifest(
        call_id=record.id_for(answer_id(got.get("id"))), run_id=record.run_id, step=record.step, model=model,
        provider="google",
        agent=record.agent, started_at=record.started_at, ended_at=record.ended_at, parts=parts, segments=segments,
        usage=normalize_usage(got["usage"], "gemini") if got.get("usage") else None,
        window=record.window, output_reserve=int(config.get("maxOutputTokens") or 0) if config else 0,
        outcome=Outcome(status="error" if record.error is not None else "ok",
                        finish_reason=str(got["finish"]) if got.get("finish") else None),
        evidence_keys=record.evidence or (), include_text=record.include_text, warnings=warnings,
        builder=Builder(name="ctxkit.instrument",
                        version=f"google-genai {getattr(sdk, '__version__', '')}".strip()),
    )


APIS: dict[str, Adapter] = {GENERATE: manifest, STREAM: manifest}


# --------------------------------------------------------------------------- #
# The wire, as the proxy reads it


def claims(path: str, headers: Any) -> bool:
    """Is this request for the Gemini upstream?"""
    if path.startswith(_GEMINI_PATHS) or (path.startswith("/v1/") and ":" in path.rsplit("/", 1)[-1]):
        return True
    return any(name in headers for name in _GEMINI_HEADERS)


def is_request(params: dict[str, Any]) -> bool:
    """Do these parameters use the Gemini API's shapes (``contents``, ``systemInstruction``)?"""
    return "contents" in params or "systemInstruction" in params


def recorded(method: str, path: str, query: str) -> str:
    found = _METHOD.match(path) if method == "POST" else None
    if found is None:
        return ""
    return STREAM if found.group(2) == "streamGenerateContent" else GENERATE


def model_of(path: str) -> str:
    """The model a method's path names (``/v1beta/models/gemini-2.5-pro:generateContent``)."""
    found = _METHOD.match(path) or re.search(r"models/([^/:?]+)", path)
    return (found.group(1) if found else "").removeprefix("models/")


def with_path(request: dict[str, Any], path: str) -> dict[str, Any]:
    """The request as the mapping reads it: the body (without the SDK's own ``_url`` / ``_query``
    entries), with the model its path names."""
    body = {k: v for k, v in request.items() if not k.startswith("_")}
    model = model_of(path)
    return {**body, "model": model} if model and not body.get("model") else body


def streamed(api: str, request: dict[str, Any], path: str) -> bool:
    return api == STREAM


def well_formed(request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    out, notes = _well_formed(request, FIELDS, ())
    contents = out.get("contents")
    if isinstance(contents, list):
        kept = []
        for index, entry in enumerate(contents):
            if not isinstance(entry, dict):
                notes.append(f"$.contents[{index}] is not an object: left out")
                continue
            if entry.get("parts") is not None and not isinstance(entry.get("parts"), list):
                entry = {k: v for k, v in entry.items() if k != "parts"}
                notes.append(f"$.contents[{index}].parts is not a list: left out")
            kept.append(entry)
        out["contents"] = kept
    return out, notes


def history(api: str, request: dict[str, Any]) -> list[Any]:
    """The call's history: its ``contents``."""
    value = request.get("contents")
    return value if isinstance(value, list) else []


def message(entry: Any) -> Message:
    if not isinstance(entry, dict):
        return Message(role="", texts=(), says=False)
    parts = [p for p in entry.get("parts") or [] if isinstance(p, dict)] if isinstance(entry.get("parts"), list) else []
    texts = tuple(p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))
    role = "assistant" if entry.get("role") == "model" else str(entry.get("role") or "user")
    return Message(role=role, texts=texts, says=bool(texts))


def normal(entry: Any) -> Any:
    return entry


def previous(request: dict[str, Any]) -> str:
    return ""


def read_events(text: str) -> tuple[list[dict[str, Any]], int]:
    """The streamed chunks: server-sent events (``?alt=sse``), or a JSON array of responses; an
    array cut short keeps the chunks that arrived whole."""
    if not text.lstrip().startswith("["):
        return json_events(text)
    decoder = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    unreadable = 0
    at = text.index("[") + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            break
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:
            unreadable += 1
            break
        if isinstance(value, dict):
            out.append(value)
        else:
            unreadable += 1
    return out, unreadable


def answer_text(response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str:
    """The text the model answered (thoughts left out), from the response or the chunks."""
    chunks = list(events or ()) if events is not None else [response] if response is not None else []
    return "".join(str(p.get("text") or "") for chunk in chunks for p in _answer_parts(chunk) if not p.get("thought"))


def tool_calls(response: dict[str, Any] | None, events: list[dict[str, Any]] | None,
               wanted: Any = None) -> list[ToolCall]:
    """The ``functionCall`` parts of the answer (``wanted``: only tools of these names)."""
    chunks = list(events or ()) if events is not None else [response] if response is not None else []
    out = []
    for chunk in chunks:
        for part in _answer_parts(chunk):
            call = part.get("functionCall")
            if isinstance(call, dict) and (wanted is None or call.get("name") in wanted):
                out.append(ToolCall(id=str(call.get("id") or ""), name=call.get("name"), arguments=call.get("args")))
    return out


def response_id(api: str, response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str:
    """The response's ``responseId``, from the response or its first streamed chunk that has one."""
    chunks = list(events or ()) if events is not None else [response] if response is not None else []
    return next((answer_id(chunk["responseId"]) for chunk in chunks if chunk.get("responseId")), "")


def error_type(payload: Any) -> str:
    """``{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", ...}}``: the status."""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(payload, list) and payload and isinstance(payload[0], dict):
        error = payload[0].get("error")
    if not isinstance(error, dict):
        return ""
    return str(error.get("status") or error.get("code") or "")[:100]


def stream_error(events: list[dict[str, Any]]) -> str:
    """A chunk holding an ``error``."""
    for event in events:
        if "error" in event:
            return error_type(event) or "error"
    return ""


def error_body(message: str) -> bytes:
    """An error in the Gemini API's shape (what the proxy answers when the upstream cannot be reached)."""
    return error_json({"error": {"code": 502, "message": message, "status": "UNAVAILABLE"}})


def tool_name(tool: Any) -> str | None:
    """The name of a function declaration."""
    name = tool.get("name") if isinstance(tool, dict) else None
    return name if isinstance(name, str) and name else None


def sdk_resources(client: Any) -> list[tuple[str, Any, tuple[str, ...], Adapter, tuple[str, Adapter] | None]]:
    """The ``google-genai`` client's API client, whose ``request`` / ``request_streamed`` every
    model call goes through, and the methods it records (for ``ctxkit.instrument``)."""
    api_client = getattr(client, "_api_client", None)
    if api_client is None:
        return []
    return [("models", api_client, (":generateContent", ":streamGenerateContent"), manifest, None)]
