"""Masking values that look like secrets in the text ``ctxkit proxy`` records.

An agent's context holds what its tools read: a ``.env`` file, a shell's history, a config with
a token in it. Before a request is mapped to a manifest, every string in it goes through
:func:`mask_text`, so the items' text, the prefix segments' text and line hashes and the content
hashes are all computed from the masked text; nothing that matches leaves the machine. A match
becomes ``[masked:<kind>]``. Headers are never recorded at all (they carry the agent's own keys).

The patterns are deliberately specific (a known prefix and a minimum length) so ordinary text,
hashes and ids are not masked; one alternation, so a string is scanned once.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["PATTERNS", "mask_text", "mask_json"]

# (kind, pattern); the first that matches at a position wins, so the more specific come first.
PATTERNS: tuple[tuple[str, str], ...] = (
    ("private-key", r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|\Z)"),
    ("anthropic-key", r"\bsk-ant-[A-Za-z0-9_\-]{16,}"),
    ("openai-key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    ("stripe-key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("aws-access-key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"),
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ("gitlab-token", r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    ("slack-token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("ctxview-key", r"\bctx_[A-Za-z0-9_\-]{20,}"),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("bearer-token", r"(?i:(?<=bearer ))[A-Za-z0-9._~+/\-]{16,}=*"),
    ("url-password", r"(?<=://)[^/\s:@]{1,100}:[^/\s@]{3,200}(?=@)"),
    ("secret-assignment",
     r"(?P<name>(?<![A-Za-z0-9])(?i:[A-Z0-9_]*(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|secret|passwd|password|token))[\"']?\s*[:=]\s*[\"']?)"
     r"(?!\[masked:)[^\s\"',;)\]}>]{8,}"),
)

_ANY = re.compile("|".join(f"(?P<g{n}>{pattern})" for n, (_, pattern) in enumerate(PATTERNS)))
_KINDS = {f"g{n}": kind for n, (kind, _) in enumerate(PATTERNS)}
# Cheap test first: a string with none of these cannot match any pattern.
_HINTS = re.compile(r"(?i)sk-|sk_|rk_|AKIA|ASIA|AGPA|AIDA|AROA|ANPA|gh[pousr]_|github_pat_|glpat-|xox|AIza"
                    r"|ctx_|eyJ|bearer |PRIVATE KEY|://[^/\s]*@|key|secret|passw|token")


def _replace(match: re.Match[str]) -> str:
    kind = _KINDS[match.lastgroup or ""]
    if kind == "secret-assignment":  # keep the name and separator ("API_KEY=") so the line still reads
        return f"{match.group('name')}[masked:secret]"
    return f"[masked:{kind}]"


def mask_text(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``[masked:<kind>]``."""
    if not text or not _HINTS.search(text):
        return text
    return _ANY.sub(_replace, text)


def mask_json(value: Any) -> Any:
    """A parsed JSON value with :func:`mask_text` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {mask_text(k) if isinstance(k, str) else k: mask_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_json(v) for v in value]
    return value
