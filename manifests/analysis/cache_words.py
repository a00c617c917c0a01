"""The words of a cache cause, as a capture of the agent's requests can say them
(docs/analysis.md, "Why did our cache hit rate drop?").

A prefix change is told in the terms of the segment it broke in, from the segments' line hashes
and (when the agent sends it) text, through the prefix line diff (manifests/selectors/prefix_lines.py):

- ``system`` (and any other segment): the first line that changed, added or removed, with its
  old and new text shortened around their first difference;
- ``tools`` (one line per tool, its canonical JSON): the tools added, removed or changed, by name
  (read in the provider's shape, ctxkit.providers), and an MCP server (tools named as an agent
  names an MCP server's tools, ctxkit.agents) connected or disconnected;
- ``messages``: earlier messages modified or removed, and what did it when the call records it:
  a context edit, or a compaction (of this call, or the previous call's provider compaction).

Without text, lines and tools are named by number. A TTL is told with where it came from. The
first call of a run compared with another run's call names that call (``previous_run_call``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

from ctxkit import agents, providers
from manifests.selectors.prefix_lines import LineChange, line_diff, segment_lines

QUOTE_CHARS = 60  # characters of a line quoted in a detail
LEAD_CHARS = 20  # characters kept before the first difference of a changed line
MAX_NAMES = 5  # tools named per group; the rest are counted
# Builders whose recorded TTL is the one the request's cache_control asked for
# (sdk/ctxkit/providers/anthropic.py, cache_ttl_seconds).
CAPTURED = ("ctxkit.instrument", "ctxkit.proxy")
_PLAIN_NAME = re.compile(r"[\w.:-]{1,128}")
_PLAIN_CALL_ID = re.compile(r"[\w.:/@#-]{1,128}")


def _printable(text: str) -> str:
    """One printable line: control characters (newlines, escapes, NUL) become spaces."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


def _short(text: str, start: int = 0) -> str:
    """``text`` from ``start``, at most QUOTE_CHARS characters, quoted, with … where it was cut."""
    piece = ("…" if start > 0 else "") + text[start:start + QUOTE_CHARS]
    return repr(_printable(piece + ("…" if start + QUOTE_CHARS < len(text) else "")))


def _old_new(old: str, new: str) -> str:
    """'old' → 'new', both shortened from a little before their first difference."""
    common = len(os.path.commonprefix([old, new]))
    start = common - LEAD_CHARS if common > QUOTE_CHARS - LEAD_CHARS else 0
    return f"{_short(old, start)} → {_short(new, start)}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _segment(segments: Sequence[Any], name: str) -> dict[str, Any]:
    """The segment of that name, or an empty one (no lines) when the prefix has none."""
    found = next((s for s in segments if isinstance(s, dict) and s.get("name") == name), None)
    return found if found is not None else {"name": name, "hash": "", "lines": []}


class _Compared:
    """One segment in two prefixes: its line diff and both sides' full lines of text."""

    def __init__(self, before: Sequence[Any], after: Sequence[Any], name: str) -> None:
        self.old, self.new = _segment(before, name), _segment(after, name)
        diff = line_diff([self.old], [self.new])
        self.rows: list[LineChange] = diff.rows
        self.more = diff.more
        self.lined = not diff.unlined and bool(diff.rows)
        self.old_lines = segment_lines(self.old)[1] if self.old.get("hash") else []
        self.new_lines = segment_lines(self.new)[1] if self.new.get("hash") else []

    def texts(self, row: LineChange) -> tuple[str | None, str | None]:
        """The full old and new text of a row's line (None where not recorded or not there)."""
        before = self.old_lines[row.before_line - 1] if self.old_lines and row.before_line else None
        after = self.new_lines[row.line - 1] if self.new_lines and row.change != "removed" else None
        return before, after

    def first_line(self, label: str, *, lost_only: bool = False) -> str:
        """The first line that differs: '<label> line N changed: 'old' → 'new'' (by number only
        without text), and how many more do (``lost_only``: more lines changed or removed, as
        lines added are the conversation going on)."""
        row = self.rows[0]
        before, after = self.texts(row)
        if row.change == "changed" and before is not None and after is not None:
            words = f": {_old_new(before, after)}"
        elif row.change == "added" and after is not None:
            words = f": {_short(after)}"
        elif row.change == "removed" and before is not None:
            words = f": {_short(before)}"
        else:
            words = " (its text is not recorded)"
        line = row.line if row.change != "removed" else row.before_line
        if lost_only:
            more = sum(r.change != "added" for r in self.rows[1:])
            notes = [f"{_plural(more, 'more line')} changed or removed"] if more else []
            notes += ["more lines changed further on"] if self.more else []  # past the diff's rows
            tail = f" (and {', and '.join(notes)})" if notes else ""
        else:
            more = len(self.rows) - 1 + self.more
            tail = f" (and {_plural(more, 'more changed line')})" if more else ""
        return f"{label} line {line} {row.change}{words}{tail}"


def _tool_name(line: str | None) -> str | None:
    """The name of a tool line (its canonical JSON, in its provider's shape), or None."""
    if line is None:
        return None
    try:
        tool = json.loads(line)
    except (ValueError, RecursionError):  # a hostile line may nest deeper than the parser goes
        return None
    return providers.tool_name(tool)


def _shown(name: str) -> str:
    return name if _PLAIN_NAME.fullmatch(name) else _short(name)


def _mcp_servers(names: list[str]) -> list[str] | None:
    """The MCP servers of the tools, when every name is an MCP server's tool; else None."""
    servers = [agents.mcp_server(n) for n in names]
    if not names or any(s is None for s in servers):
        return None
    return sorted({s for s in servers if s is not None})


def _tool_group(names: list[str], unnamed: list[int], verb: str, *, across_runs: bool = False) -> str:
    shown = [_shown(n) for n in names] + [f"at line {n}" for n in unnamed]
    if not shown:
        return ""
    rest = len(shown) - MAX_NAMES
    listed = ", ".join(shown[:MAX_NAMES]) + (f" and {rest} more" if rest > 0 else "")
    words = f"{'tool' if len(shown) == 1 else 'tools'} {listed} {verb}"
    servers = _mcp_servers(names) if not unnamed else None
    if servers and verb in ("added", "removed"):
        which = f"{'an MCP server' if len(servers) == 1 else 'MCP servers'} ({', '.join(map(_shown, servers))})"
        when = "" if across_runs else " mid-session"
        words += f": {which} {'connected' if verb == 'added' else 'disconnected'}{when}"
    return words


def _tools(c: _Compared, *, across_runs: bool = False) -> str:
    old_hashes, new_hashes = c.old.get("lines") or [], c.new.get("lines") or []
    if old_hashes and sorted(old_hashes) == sorted(new_hashes):
        row = c.rows[0]
        name = _tool_name(c.texts(row)[1])
        now = f" ({_shown(name)} is now there)" if name else ""
        return f"tools reordered: the same {len(new_hashes)} tools in another order from line {row.line}{now}"
    names: dict[str, list[str]] = {"added": [], "removed": [], "changed": []}
    unnamed: dict[str, list[int]] = {"added": [], "removed": [], "changed": []}
    for row in c.rows:
        before, after = (_tool_name(t) for t in c.texts(row))
        if row.change == "changed" and before and after and before != after:
            names["removed"].append(before)  # another tool in its place
            names["added"].append(after)
        elif (name := after if row.change != "removed" else before) is not None:
            names[row.change].append(name)
        else:
            unnamed[row.change].append(row.line if row.change != "removed" else row.before_line or row.line)
    groups = [_tool_group(names[k], unnamed[k], k, across_runs=across_runs) for k in ("added", "removed", "changed")]
    tail = f" (and {_plural(c.more, 'more changed line')})" if c.more else ""
    return "; ".join(g for g in groups if g) + tail


def _messages(c: _Compared, edits: Sequence[str], compactions: Sequence[str], previous_compactions: Sequence[str]
              ) -> str:
    if edits:
        why = f"earlier messages were cleared by a context edit ({', '.join(map(_shown, edits))})"
    elif compactions:
        why = f"earlier messages were replaced by a compaction summary ({', '.join(map(_shown, compactions))})"
    elif previous_compactions:
        why = ("earlier messages were replaced by the compaction summary of the previous call "
               f"({', '.join(map(_shown, previous_compactions))})")
    else:
        why = "earlier messages were modified or removed"
    return f"{why}: {c.first_line('messages', lost_only=True)}"


def prefix_change(before: Sequence[Any], after: Sequence[Any], segment: str, *, edits: Sequence[str] = (),
                  compactions: Sequence[str] = (), previous_compactions: Sequence[str] = (),
                  across_runs: bool = False) -> str:
    """What changed in ``segment`` between two prefixes' stored segments, in the words above, or
    "" when its line hashes do not show it. ``edits``: the types of the call's context edits;
    ``compactions``: the strategies of its compactions and of the previous call's;
    ``across_runs``: ``before`` is another run's (an MCP server connected between the runs, not
    mid-session)."""
    c = _Compared(before, after, segment)
    if not c.lined:
        return ""
    if segment == "tools":
        return _tools(c, across_runs=across_runs)
    if segment == "messages":
        return _messages(c, edits, compactions, previous_compactions)
    return c.first_line("system prompt" if segment == "system" else f"segment {segment!r}")


def previous_run_call(call_id: str) -> str:
    """The call of another run a run's first call is compared with, by its id (quoted, printable
    and shortened when it is not a plain id)."""
    shown = call_id if _PLAIN_CALL_ID.fullmatch(call_id) else _short(call_id)
    return f"the previous run's call {shown}"


def cleared_by_provider(edits: Sequence[str]) -> str:
    """A request that only grew, read nothing within the TTL, and records context edits: the
    provider cleared earlier messages before the model read them (Anthropic's context
    management), so the prompt changed where the request did not."""
    return (f"earlier messages were cleared by a context edit ({', '.join(map(_shown, edits))}) applied to this "
            "request: the messages it sent only grew, but the prompt read changed where they were cleared")


def duration(seconds: float) -> str:
    """5 min, 1 h, 90 s."""
    s = int(seconds)
    if s and s % 3600 == 0:
        return f"{s // 3600} h"
    if s and s % 60 == 0:
        return f"{s // 60} min"
    return f"{s} s"


def ttl(seconds: int, *, recorded: bool, builder: str) -> str:
    """The TTL in force and where it came from."""
    if not recorded:
        return f"{duration(seconds)}, the model's TTL in the price table"
    if builder in CAPTURED:
        return f"{duration(seconds)} TTL from the request's cache_control"
    return f"{duration(seconds)}, the TTL the agent recorded"
