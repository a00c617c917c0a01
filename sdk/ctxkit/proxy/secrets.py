"""Masking values that look like secrets in the text ``ctxkit proxy`` records.

An agent's context holds what its tools read: a ``.env`` file, a shell's history, a config with
a token in it. Before a request is mapped to a manifest, its JSON text goes through
:func:`mask_json_text`, so the items' text, the prefix segments' text and line hashes and the
content hashes are all computed from the masked text; nothing that matches leaves the machine.
A match becomes ``[masked:<kind>]``. Headers are never recorded at all (they carry the agent's
own keys).

The patterns are deliberately specific (a known prefix and a minimum length) so ordinary text,
hashes and ids are not masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["PATTERNS", "mask_text", "mask_json", "mask_json_text"]

# (kind, hints, pattern). A pattern runs only on text holding one of its hints (lower case;
# substring searches, in C), and each starts with a literal where it can, which the regex engine
# scans for quickly; most of a context holds none. Applied in this order (the specific before
# the general); a ``keep`` group is kept before the mask ("Bearer ", "API_KEY=").
PATTERNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("private-key", ("private key",),
     r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[^\"]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|(?=\")|\Z)"),
    ("anthropic-key", ("sk-ant-",), r"sk-ant-[A-Za-z0-9_\-]{16,}"),
    ("openai-key", ("sk-",), r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    ("stripe-key", ("k_live_", "k_test_"), r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("aws-access-key", ("akia", "asia", "agpa", "aida", "aroa", "anpa"),
     r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"),
    ("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
     r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
    ("gitlab-token", ("glpat-",), r"glpat-[A-Za-z0-9_\-]{20,}"),
    ("slack-token", ("xox",), r"xox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("google-api-key", ("aiza",), r"AIza[0-9A-Za-z_\-]{35}"),
    ("ctxview-key", ("ctx_",), r"ctx_[A-Za-z0-9_\-]{20,}"),
    ("jwt", ("eyj",), r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("bearer-token", ("bearer",), r"(?P<keep>(?i:bearer)\s+)[A-Za-z0-9._~+/\-]{16,}=*"),
    ("url-password", ("://",), r"(?P<keep>://)[^/\s:@\"\\]{1,100}:[^/\s@\"\\]{3,200}(?=@)"),
    # a value assigned to a secret-looking name: API_KEY=..., "password": "...", token: ...
    ("secret", ("key", "secret", "passw", "token"),
     r"(?P<keep>(?i:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|secret|passwd|password|token)"
     r"\\?[\"']?\s*[:=]\s*\\?[\"']?)(?!\[masked:)[^\s\"'\\,;)\]}>]{8,}"),
)
# Patterns stop at a quote or backslash, so masking a JSON document's text keeps it JSON.

_COMPILED = tuple((kind, hints, re.compile(pattern)) for kind, hints, pattern in PATTERNS)


def _masker(kind: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        keep = match.groupdict().get("keep") or ""
        return f"{keep}[masked:{kind}]"
    return replace


_REPLACERS = {kind: _masker(kind) for kind, _, _ in PATTERNS}


def mask_json_text(text: str) -> tuple[str, int]:
    """``text`` with every secret-looking value replaced by ``[masked:<kind>]``, and how many
    were. Works on a whole JSON document at once: the patterns stop at a quote or backslash, so
    the result is JSON of the same shape (the caller parses it; should that ever fail,
    :func:`mask_json` on the parsed value reaches the same result string by string)."""
    if not text:
        return text, 0
    lowered = text.lower()
    total = 0
    for kind, hints, pattern in _COMPILED:
        if any(hint in lowered for hint in hints):
            text, count = pattern.subn(_REPLACERS[kind], text)
            total += count
    return text, total


def mask_text(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``[masked:<kind>]``."""
    return mask_json_text(text)[0]


def mask_json(value: Any) -> Any:
    """A parsed JSON value with :func:`mask_text` applied to every string in it (keys included)."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {mask_text(k) if isinstance(k, str) else k: mask_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_json(v) for v in value]
    return value
