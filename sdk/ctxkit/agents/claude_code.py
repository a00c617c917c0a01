"""Claude Code's habits, as its requests show them (Anthropic Messages through ``ANTHROPIC_BASE_URL``).

- Session: the ``X-Claude-Code-Session-Id`` header, or the ``session_id`` inside
  ``metadata.user_id`` (a JSON string) of its requests.
- Sub-agents: its tool ``Agent`` (``Task`` in earlier versions) starts one; the tool call's
  ``prompt`` opens the sub-agent's first user message, ``subagent_type`` names it.
- Summaries: a compacted history opens with :data:`OPENING`; its ``/compact`` command leaves a
  ``<command-name>/compact</command-name>`` block in a later user message of the same call
  (without one the compaction was the CLI's own, on a full window).
- Memory files: CLAUDE.md and its rules go into one user text block inside
  ``<system-reminder>``, each under a line "Contents of <path> (<what it is>):".
- MCP tools are named ``mcp__<server>__<tool>``.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["OPENING", "SESSION_HEADER", "SUBAGENT_TOOLS", "MCP_PREFIX", "MCP_MARK", "session", "delegation",
           "is_summary", "summary_trigger", "memory_files", "mcp_server"]

OPENING = "This session is being continued from a previous conversation"
SESSION_HEADER = "x-claude-code-session-id"
SUBAGENT_TOOLS = ("Agent", "Task")  # the tool that starts a sub-agent, then and now
MCP_PREFIX = "mcp__"
# A tool definition's canonical JSON (compact) holds this when the tool is an MCP server's,
# whatever the provider's shape ({"name": ...} or {"function": {"name": ...}}).
MCP_MARK = f'"name":"{MCP_PREFIX}'
_MANUAL = re.compile(r"<command-name>\s*/compact\s*</command-name>")
_REMINDER = "<system-reminder>"
_FILE = re.compile(r"^Contents of (\S[^\n]*?) \([^()\n]*\):$", re.MULTILINE)


def session(request: dict[str, Any], headers: dict[str, str]) -> str:
    """The session id: the header, else ``metadata.user_id``'s ``session_id``; ``""`` without one."""
    found = headers.get(SESSION_HEADER, "").strip()
    if found:
        return found
    metadata = request.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str) and user_id.startswith("{"):
        try:
            parsed = json.loads(user_id)
        except ValueError:
            return ""
        inner = parsed.get("session_id") if isinstance(parsed, dict) else None
        if isinstance(inner, str):
            return inner.strip()
    return ""


def delegation(name: Any, arguments: Any) -> tuple[str, str] | None:
    """(prompt, subagent type) when a tool call of ``name`` with ``arguments`` (a dict or its
    JSON text) starts a sub-agent, else None."""
    if name not in SUBAGENT_TOOLS:
        return None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict) or not isinstance(arguments.get("prompt"), str):
        return None
    kind = arguments.get("subagent_type")
    return arguments["prompt"], kind if isinstance(kind, str) else ""


def is_summary(head: str) -> bool:
    """Does this text (stripped at the left) open like Claude Code's compaction summary?"""
    return head.startswith(OPENING)


def summary_trigger(user_text: str) -> str:
    """Given the user messages from the one holding a summary on: ``manual`` when they hold the
    ``/compact`` command, ``auto`` when they hold Claude Code's summary without one, else ``""``."""
    if _MANUAL.search(user_text):
        return "manual"
    if OPENING in user_text:
        return "auto"
    return ""


def memory_files(head: str) -> list[str] | None:
    """The files a user text (stripped at the left) injects when it is the memory-file reminder."""
    if head.startswith(_REMINDER):
        return _FILE.findall(head) or None
    return None


def mcp_server(name: str) -> str | None:
    """The MCP server of a tool named ``mcp__<server>__<tool>``, else None."""
    parts = name.split("__")
    if len(parts) < 3 or parts[0] != MCP_PREFIX.rstrip("_") or not parts[1]:
        return None
    return parts[1]
