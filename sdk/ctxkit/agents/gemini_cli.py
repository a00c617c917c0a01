"""Gemini CLI's habits, as its requests show them (the Gemini API through ``GOOGLE_GEMINI_BASE_URL``).

- It names itself in its User-Agent (``GeminiCLI/0.61.0/<model> (...)``, ``GeminiCLI-tui/...``).
- Session: it sends no session id. Every call of a session, the turns and the side requests
  it makes on a small model (routing, next-speaker checks), opens its contents with the same
  ``<session_context>`` text (date, OS, workspace folders and their listing), and every call
  carries the installation's id (``x-gemini-api-privileged-user-id``): the two together name
  the session. Two sessions started in the same folder on the same day, with the folder
  unchanged, are one run unless ``X-Ctxview-Run`` tells them apart.
- Memory files: its GEMINI.md files go into that session context, each between
  ``--- Context from: <path> ---`` and ``--- End of Context from: <path> ---``.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["INSTALLATION_HEADER", "is_gemini_cli", "memory_files", "session"]

INSTALLATION_HEADER = "x-gemini-api-privileged-user-id"
_PRODUCT = "GeminiCLI"
_CONTEXT = "<session_context>"
_FILE = re.compile(r"^--- Context from: (\S[^\n]*?) ---$", re.MULTILINE)


def is_gemini_cli(headers: dict[str, str]) -> bool:
    return headers.get("user-agent", "").startswith(_PRODUCT)


def session(headers: dict[str, str], first_text: str) -> str:
    """The session id: a hash of the installation id and the session context its first user
    text opens with; ``""`` for another client or a call without one."""
    if not is_gemini_cli(headers) or not first_text.lstrip().startswith(_CONTEXT):
        return ""
    context = first_text.lstrip().split("</session_context>", 1)[0]
    seed = f"{headers.get(INSTALLATION_HEADER, '')}\x1f{context}"
    return "gemini-" + hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def memory_files(head: str) -> list[str] | None:
    """The GEMINI.md files a user text (stripped at the left) injects when it is the session
    context holding them, by their paths; None for any other text."""
    if not head.startswith(_CONTEXT):
        return None
    return _FILE.findall(head) or None
