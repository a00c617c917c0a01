"""The manifest of one model call given as plain JSON: the request body, and the response body
or the streamed events, as parsed dicts.

The second entry point into the one mapping of ``ctxkit.instrument`` (anthropic.py, openai.py):
``instrument(client)`` hands those adapters the SDK's objects, ``ctxkit proxy`` hands them the
bodies it forwarded; both give the same items, prefix segments, usage, context edits,
compactions and outcome for the same call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxkit.instrumentation import anthropic, openai
from ctxkit.instrumentation.recorder import CallRecord
from ctxkit.manifest import Manifest

__all__ = ["APIS", "ProviderError", "manifest_from_bodies", "well_formed"]

# What each recorded API's adapter is: Anthropic Messages, OpenAI Chat Completions and Responses,
# and a resumed Responses stream (GET /v1/responses/{id}?stream=true: no request body).
APIS: dict[str, Callable[[CallRecord], Manifest]] = {
    "anthropic.messages": anthropic.manifest,
    "openai.chat": openai.chat_manifest,
    "openai.responses": openai.responses_manifest,
    "openai.responses.resumed": openai.resumed_manifest,
}


# Top-level fields the mapping reads, and the JSON types it can read them as; a body from the
# wire may hold anything (the provider answers such a request with a 400 of its own).
_FIELDS: dict[str, tuple[type, ...]] = {
    "model": (str,), "max_tokens": (int, float), "max_completion_tokens": (int, float),
    "max_output_tokens": (int, float), "system": (str, list), "tools": (list,), "messages": (list,),
    "input": (str, list), "instructions": (str,),
}
_CONTENT: tuple[type, ...] = (str, list, type(None))


def well_formed(request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``request`` without the fields the mapping cannot read (a number where a list belongs,
    a message that is not an object, ...), and a warning naming each one's JSON path."""
    out = dict(request)
    notes = []
    for name, types in _FIELDS.items():
        value = out.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            del out[name]
            notes.append(f"$.{name} is not a {' or '.join(t.__name__ for t in types)}: left out")
    for name in ("messages", "input"):
        entries = out.get(name)
        if not isinstance(entries, list):
            continue
        kept = []
        for index, entry in enumerate(entries):
            path = f"$.{name}[{index}]"
            if not isinstance(entry, dict):
                notes.append(f"{path} is not an object: left out")
                continue
            if not isinstance(entry.get("content"), _CONTENT):
                entry = {k: v for k, v in entry.items() if k != "content"}
                notes.append(f"{path}.content is not a string or list: left out")
            calls = entry.get("tool_calls")
            if calls is not None and not (isinstance(calls, list) and all(
                    isinstance(c, dict) and isinstance(c.get("function") or {}, dict) for c in calls)):
                entry = {k: v for k, v in entry.items() if k != "tool_calls"}
                notes.append(f"{path}.tool_calls is not a list of tool calls: left out")
            kept.append(entry)
        out[name] = kept
    return out, notes


class ProviderError(Exception):
    """A call that did not succeed: the provider's HTTP status (0: no answer at all) and its
    error type (``rate_limit_error``, ``overloaded_error``, ...) when the body names one."""

    def __init__(self, status_code: int, error_type: str = "") -> None:
        super().__init__(f"HTTP {status_code} {error_type}".strip())
        self.status_code = status_code or None
        self.error_type = error_type


def manifest_from_bodies(
    api: str,
    request: dict[str, Any],
    *,
    response: dict[str, Any] | None = None,
    events: list[dict[str, Any]] | None = None,
    error: BaseException | None = None,
    call_id: str = "",
    run_id: str,
    step: int,
    agent: str = "default",
    started: float,
    duration: float = 0.0,
    include_text: bool = True,
    window: int | None = None,
    evidence: list[str] | dict[str, str] | None = None,
) -> Manifest:
    """The manifest of one call of ``api`` (a key of :data:`APIS`). ``events``: the data of each
    server-sent event of a streamed response, in order (``response`` is then ignored);
    ``started``: ``time.time()`` when the request was sent; ``duration`` in seconds."""
    request, notes = well_formed(request)
    record = CallRecord(APIS[api], request, run_id, step, agent, evidence, window, include_text, started,
                        duration=duration, response=response, error=error, stream_events=events,
                        _call_id=call_id)
    manifest: Manifest = record.adapter(record)
    if notes:
        manifest.warnings = [*manifest.warnings, *notes][:100]
    return manifest
