"""Gemini CLI's habits, as its requests show them (the Gemini API through ``GOOGLE_GEMINI_BASE_URL``).

- It names itself in its User-Agent (``GeminiCLI/0.61.0/<model> (...)``, ``GeminiCLI-tui/...``).
- Session: it sends no session id. Every call of a session, the turns and the side requests
  it makes on a small model (routing, next-speaker checks), opens its contents with the same
  ``<session_context>`` text (date, OS, workspace folders and their listing), and every call
  carries the installation's id (``x-gemini-api-privileged-user-id``): the two together name
  the session. Two sessions started in the same folder on the same day, with the folder
  unchanged, are one run unless ``X-Ctxview-Run`` tells them apart.
"""

from __future__ import annotations

import hashlib

__all__ = ["INSTALLATION_HEADER", "is_gemini_cli", "session"]

INSTALLATION_HEADER = "x-gemini-api-privileged-user-id"
_PRODUCT = "GeminiCLI"
_CONTEXT = "<session_context>"


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
