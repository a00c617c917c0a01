"""What any agent may do, whoever made it.

- Summaries: a compacted history opens with ``Summary:`` / ``Conversation summary:`` /
  ``Summary of the earlier conversation:`` or a ``<summary>`` tag.
- Its name: the product of its User-Agent (``claude-cli/2.1.3 (external, cli)`` -> ``claude-cli``).
"""

from __future__ import annotations

import re

__all__ = ["is_summary", "product"]

_SUMMARY = re.compile(r"\A\s*(?:<summary>|(?:conversation |session )?summary(?: of the (?:earlier |previous )?"
                      r"conversation)?\s*:)", re.IGNORECASE)


def is_summary(head: str) -> bool:
    """Does this text open like a compaction summary?"""
    return bool(_SUMMARY.match(head))


def product(user_agent: str) -> str:
    """The product named first in a User-Agent, ``""`` without one."""
    return user_agent.split(" ")[0].split("/")[0].strip()
