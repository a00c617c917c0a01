"""Which text of a request is an agent's own compaction summary, and how it was triggered.

An agent that compacts itself sends the summary of its earlier conversation at the head of the
next call, as a user text: Claude Code's opens with :data:`CLAUDE_CODE_OPENING` (its ``/compact``
command leaves a ``<command-name>/compact</command-name>`` block in a later user message of the same call;
without one the compaction was the CLI's own, on a full window); other agents open with
``Summary:`` / ``Conversation summary:`` or a ``<summary>`` tag. The adapters look only at the
first user message, so a user who writes "Summary:" later in a conversation is not taken for a
compaction. Provider-side compactions (Anthropic's ``compaction`` block, OpenAI's ``compaction``
input item) are recognised by their type in the adapters, not here.
"""

from __future__ import annotations

import re

__all__ = ["CLAUDE_CODE_OPENING", "summary_strategy", "summary_trigger"]

CLAUDE_CODE_OPENING = "This session is being continued from a previous conversation"
_GENERIC = re.compile(r"\A\s*(?:<summary>|(?:conversation |session )?summary(?: of the (?:earlier |previous )?"
                      r"conversation)?\s*:)", re.IGNORECASE)
_MANUAL = re.compile(r"<command-name>\s*/compact\s*</command-name>")


def summary_strategy(text: str) -> str:
    """``client_summary`` when ``text`` opens like a compaction summary, else ``""``."""
    head = text.lstrip()[:200]
    if head.startswith(CLAUDE_CODE_OPENING) or _GENERIC.match(head):
        return "client_summary"
    return ""


def summary_trigger(user_text: str) -> str:
    """Given the user messages from the one holding a Claude Code summary on: ``manual`` when
    they hold its ``/compact`` command, ``auto`` without one, else ``""`` (not readable)."""
    if _MANUAL.search(user_text):
        return "manual"
    if CLAUDE_CODE_OPENING in user_text:
        return "auto"
    return ""
