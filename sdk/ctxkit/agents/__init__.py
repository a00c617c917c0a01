"""What each agent does that its provider's wire format does not say: how its sessions,
sub-agents, compaction summaries, memory files and side requests are recognised.

One module per agent with habits of its own (``claude_code``, ``codex``, ``gemini_cli``) and
``generic`` for what any agent may do. The rest of ctxkit (the proxy's runs and compactions,
the mapping's item kinds, the window breakdown) and the server's cache words ask these
functions; none of them names an agent's texts or headers itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxkit.agents import claude_code, codex, gemini_cli, generic

__all__ = ["Delegation", "IDENTITY_HEADERS", "MCP_MARK", "SUBAGENT_TOOLS", "agent_name", "delegation", "mcp_server",
           "memory_files", "session_of", "summary_strategy", "summary_trigger", "agent_context", "workspace"]

# Request headers an agent identifies its session by (kept with the exchange; never a credential).
IDENTITY_HEADERS: tuple[str, ...] = (claude_code.SESSION_HEADER, *codex.SESSION_HEADERS,
                                     gemini_cli.INSTALLATION_HEADER, gemini_cli.SESSION_HEADER)
MCP_MARK = claude_code.MCP_MARK
SUBAGENT_TOOLS: tuple[str, ...] = claude_code.SUBAGENT_TOOLS  # tools whose calls start a sub-agent


@dataclass(frozen=True)
class Delegation:
    """A sub-agent's start that an answer asked for: its tool call id, prompt and type."""

    tool_use_id: str
    prompt: str
    subagent_type: str = ""


def session_of(request: dict[str, Any], headers: dict[str, str], first_text: str = "") -> str:
    """The agent's own session id for a request (``first_text``: the first text of its first
    user message), ``""`` when it names none."""
    return claude_code.session(request, headers) or codex.session(headers) or gemini_cli.session(headers, first_text)


def agent_name(headers: dict[str, str], default: str) -> str:
    """``default`` when given, else the client's product from its User-Agent, else ``proxy``."""
    if default:
        return default
    return generic.product(headers.get("user-agent", "")) or "proxy"


def delegation(call_id: str, name: Any, arguments: Any) -> Delegation | None:
    """The sub-agent a tool call starts (Claude Code's ``Agent`` / ``Task``), else None."""
    found = claude_code.delegation(name, arguments)
    if found is None:
        return None
    return Delegation(tool_use_id=call_id, prompt=found[0], subagent_type=found[1])


def summary_strategy(text: str, *, first: bool = True) -> str:
    """``client_summary`` when ``text`` opens like an agent's compaction summary or is one (Gemini
    CLI's snapshot), else ``""``. ``first``: the text is in the history's first user message,
    where Claude Code's opening, Gemini CLI's snapshot and a generic ``Summary:`` count, so a user
    who writes "Summary:" later in a conversation is not taken for a compaction; Codex puts its
    summary after the user messages it keeps, so its opening counts in any user message."""
    head = text.lstrip()[:200]
    if codex.is_summary(head) or (first and (claude_code.is_summary(head) or generic.is_summary(head)
                                             or gemini_cli.is_summary(text))):
        return "client_summary"
    return ""


def summary_trigger(user_text: str) -> str:
    """``manual`` / ``auto`` when the user messages from the summary on tell (Claude Code's
    ``/compact``), else ``""``."""
    return claude_code.summary_trigger(user_text)


def agent_context(text: str) -> bool:
    """Is this user text context an agent writes itself (Codex's environment context and
    AGENTS.md messages) rather than a turn of the user?"""
    return codex.is_context(text.lstrip())


def memory_files(text: str) -> list[str] | None:
    """The files a user text injects when it is an agent's memory-file message (Claude Code's
    CLAUDE.md reminder, Codex's AGENTS.md instructions, Gemini CLI's session context with its
    GEMINI.md files), by their paths; None for any other text."""
    head = text.lstrip()
    return claude_code.memory_files(head) or codex.memory_files(head) or gemini_cli.memory_files(head)


def mcp_server(name: str) -> str | None:
    """The MCP server a tool's name says it comes from, else None."""
    return claude_code.mcp_server(name)


def workspace(request: dict[str, Any]) -> tuple[str, str]:
    """(working directory, git branch) where a request tells them (Claude Code's environment
    section and git status, Codex's environment context: its cwd only), ``""`` for what it does not."""
    cwd, branch = claude_code.workspace(request)
    return cwd or codex.working_directory(request), branch
