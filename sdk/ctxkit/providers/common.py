"""What the providers' modules share: the views the proxy reads a call through (a history
message, a tool call), the provider error shape most APIs use, and reading a request body
that may hold anything."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ctxkit.context.layout import canonical_json

__all__ = ["Message", "ToolCall", "answer_id", "block_text", "error_json", "nested_error_type", "well_formed"]

_CONTROL = re.compile("[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Message:
    """One entry of a call's history as the proxy compares histories: its role (``""`` for an
    entry without one), its texts (text blocks, and a compaction's content), whether it says
    something of its own (a text, not only tool results), and the strategy of the provider
    compaction it is or holds (``""``: none)."""

    role: str
    texts: tuple[str, ...]
    says: bool
    compaction: str = ""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call an answer made: its id, the tool's name and its arguments (a dict, or the
    JSON text a stream assembled)."""

    id: str
    name: Any
    arguments: Any


def canonical_arguments(arguments: Any) -> Any:
    """A tool call's arguments as its key reads them (the tool call item's text, whose hash finds
    re-reads: docs/analysis.md, "Re-reads"): arguments sent as JSON text (OpenAI's
    ``arguments``) re-written as canonical JSON, keys sorted and no spaces, so that the same
    call written in another key order is the same call; text that is not JSON, and arguments
    sent as an object (canonical wherever the item's text is written), as they are."""
    if not isinstance(arguments, str):
        return arguments
    try:
        return canonical_json(json.loads(arguments))
    except ValueError:
        return arguments


def answer_id(value: Any) -> str:
    """A response's own id as a call id: a non-empty string a manifest's ``call_id`` may hold
    (at most 200 characters, no control characters); ``""`` for anything else."""
    if isinstance(value, str) and value and len(value) <= 200 and not _CONTROL.search(value):
        return value
    return ""


def block_text(block: Any) -> str:
    """The text of a content block: a ``compaction`` block's content, else its ``text``."""
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "compaction":
        content = block.get("content")
        return content if isinstance(content, str) else ""
    text = block.get("text")
    return text if isinstance(text, str) else ""


def nested_error_type(payload: Any) -> str:
    """``{"error": {"type"/"code": ...}}`` (Anthropic, OpenAI), or ``error`` for a body of
    ``type: "error"``; ``""`` otherwise."""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    if isinstance(error, dict):
        return str(error.get("type") or error.get("code") or "")[:100]
    if payload.get("type") == "error":
        return "error"
    return ""


def error_json(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


_CONTENT: tuple[type, ...] = (str, list, type(None))


def well_formed(request: dict[str, Any], fields: dict[str, tuple[type, ...]], entries: tuple[str, ...]
                ) -> tuple[dict[str, Any], list[str]]:
    """``request`` without the fields the mapping cannot read (``fields``: the top-level fields
    and the JSON types it reads them as; ``entries``: the lists of messages, whose entries must
    be objects with a string or list ``content``), and a warning naming each one's JSON path."""
    out = dict(request)
    notes = []
    for name, types in fields.items():
        value = out.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            del out[name]
            notes.append(f"$.{name} is not a {' or '.join(t.__name__ for t in types)}: left out")
    for name in entries:
        listed = out.get(name)
        if not isinstance(listed, list):
            continue
        kept = []
        for index, entry in enumerate(listed):
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


def body_as_sent(request: dict[str, Any], path: str) -> dict[str, Any]:
    """The request as the mapping reads it, for APIs whose path adds nothing to the body."""
    return request


def entries_of(request: dict[str, Any], key: str) -> list[Any]:
    """A call's history from its ``key`` entry: a list as it is, a string as one user message."""
    value = request.get(key)
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return value if isinstance(value, list) else []
