"""OpenAI Codex CLI's habits, as its requests show them (OpenAI Responses through a
``model_providers`` entry of ``$CODEX_HOME/config.toml``).

- Memory files: each AGENTS.md goes in as a user message "# AGENTS.md instructions for <folder>".
- Its run follows from the conversation: every turn's ``input`` extends the previous one.
"""

from __future__ import annotations

import re

__all__ = ["memory_files"]

_AGENTS_FILE = re.compile(r"\A# AGENTS\.md instructions for (\S[^\n]*)")


def memory_files(head: str) -> list[str] | None:
    """The AGENTS.md a user text (stripped at the left) injects, by its path; None for any other."""
    found = _AGENTS_FILE.match(head)
    if not found:
        return None
    folder = found.group(1).strip()
    return [folder if folder.endswith("AGENTS.md") else f"{folder.rstrip('/')}/AGENTS.md"]
