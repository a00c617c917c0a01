"""Reading server-sent events back out of the bytes a proxied stream forwarded.

The proxy forwards a stream's bytes untouched as they arrive and keeps a copy; the copy is
parsed here, off the event loop, once the stream has ended. The parser follows the SSE rules
that matter for the providers' streams: events end at a blank line, lines end in LF, CRLF or
CR, ``data:`` lines of one event are joined with LF, one space after the colon is dropped, and
comment lines (``:``) are ignored. A last event without its blank line (a stream cut short) is
kept.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["parse_events", "json_events"]

_LINES = re.compile(r"\r\n|\r|\n")


def parse_events(text: str) -> list[tuple[str, str]]:
    """(event name, data) of each event in ``text``; the name is "" when the event has none."""
    events: list[tuple[str, str]] = []
    name = ""
    data: list[str] = []
    for line in _LINES.split(text):
        if not line:
            if data:
                events.append((name, "\n".join(data)))
            name, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if data:
        events.append((name, "\n".join(data)))
    return events


def json_events(text: str) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects the events carry, in order, and how many events carried none
    (OpenAI's closing ``[DONE]`` is not counted)."""
    out: list[dict[str, Any]] = []
    unreadable = 0
    for _, data in parse_events(text):
        if data == "[DONE]":
            continue
        try:
            value = json.loads(data)
        except ValueError:
            unreadable += 1
            continue
        if isinstance(value, dict):
            out.append(value)
        else:
            unreadable += 1
    return out, unreadable
