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

# The names whose assigned value is a secret, wherever they end a longer name (DB_PASSWORD).
_NAME = (r"(?i:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|secret|passwd|password|passphrase"
         r"|token)")
_NAME_AT_END = re.compile(_NAME + r"\Z")

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
    # a value assigned to a secret-looking name (API_KEY=..., "password": "...", token: ...), masked
    # whole: a quoted value up to its closing quote, any other up to the end of the line
    ("secret", ("key", "secret", "passw", "passphrase", "token"),
     rf"(?P<keep>{_NAME}[\"']?\s*[:=]\s*[\"']?)(?!\[masked:)"
     r"(?:(?<=\")[^\"\r\n]+|(?<=')[^'\r\n]+|(?<![\"'])(?![\"'])[^\r\n]+)"),
)

# The same rule for the text of a JSON document, where a line ends at a ``\n`` or ``\r`` escape
# and a string at an unescaped quote. A value is read escape by escape (``\\.``), so a mask
# never cuts one in half and the document stays JSON of the same shape: a key's string value is
# masked whole (a number, ``null`` or ``true`` after a key is left alone), a value inside a
# string up to its closing ``\"`` or ``'``, or else to the end of its line or string.
_JSON_SECRET = (
    rf"(?P<keep>{_NAME}(?:\"\s*:\s*\"|(?:\\\"|')?\s*[:=]\s*(?:\\\"|')?))(?!\[masked:)"
    r"(?:(?<=\\\")(?:\\[^\"nr]|[^\"\\])+"
    r"|(?<=')(?:\\[^nr]|[^'\"\\])+"
    r"|(?<=\")(?<!\\\")(?:\\.|[^\"\\])+"
    r"|(?<![\"'])(?!\\?[\"'])(?:\\[^nr]|[^\"\\])+)"
)

_COMPILED = tuple((kind, hints, re.compile(pattern)) for kind, hints, pattern in PATTERNS)
_COMPILED_JSON = tuple((kind, hints, re.compile(_JSON_SECRET) if kind == "secret" else compiled)
                       for kind, hints, compiled in _COMPILED)


def _masker(kind: str) -> Callable[[re.Match[str]], str]:
    def replace(match: re.Match[str]) -> str:
        keep = match.groupdict().get("keep") or ""
        return f"{keep}[masked:{kind}]"
    return replace


_REPLACERS = {kind: _masker(kind) for kind, _, _ in PATTERNS}


# Patterns that open with a secret-looking name, case-insensitive: no literal for the regex
# engine to scan for, so each would be tried at every character. Their matches start at most
# this many characters before one of their hints ("private_key" 8 before "key"), so they are
# tried only there.
_LEADS = {"secret": 8, "bearer-token": 0}


def _subn_near(pattern: re.Pattern[str], kind: str, text: str, lowered: str, hints: tuple[str, ...],
               lead: int) -> tuple[str, int]:
    """``pattern.subn`` with the pattern tried only where a match can start (``lowered``: the
    text in lower case, as long as the text), in order, each match's end skipped past."""
    starts: set[int] = set()
    for hint in hints:
        at = lowered.find(hint)
        while at >= 0:
            starts.update(range(max(0, at - lead), at + 1))
            at = lowered.find(hint, at + 1)
    pieces: list[str] = []
    done = count = 0
    for start in sorted(starts):
        match = pattern.match(text, start) if start >= done else None
        if match is not None:
            pieces += [text[done:start], _REPLACERS[kind](match)]
            done, count = match.end(), count + 1
    return ("".join(pieces) + text[done:], count) if count else (text, 0)


def _mask(text: str, compiled: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...]) -> tuple[str, int]:
    if not text:
        return text, 0
    lowered = text.lower()
    total = 0
    for kind, hints, pattern in compiled:
        if any(hint in lowered for hint in hints):
            lead = _LEADS.get(kind)
            if lead is not None and len(lowered) == len(text):  # lower() kept every position
                text, count = _subn_near(pattern, kind, text, lowered, hints, lead)
            else:
                text, count = pattern.subn(_REPLACERS[kind], text)
            if count:
                lowered = text.lower()
            total += count
    return text, total


def mask_json_text(text: str) -> tuple[str, int]:
    """The text of a JSON document with every secret-looking value replaced by
    ``[masked:<kind>]``, and how many were. Works on the whole document at once: the patterns
    stop at a quote or an escape, so the result is JSON of the same shape (the caller parses it;
    should that ever fail, :func:`mask_json` on the parsed value reaches the same result string by
    string)."""
    return _mask(text, _COMPILED_JSON)


def mask_text(text: str) -> str:
    """``text`` with every secret-looking value replaced by ``[masked:<kind>]``."""
    return _mask(text, _COMPILED)[0]


def mask_json(value: Any) -> Any:
    """A parsed JSON value with :func:`mask_text` applied to every string in it (keys included);
    the string value of a key that ends in a secret-looking name is masked whole."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {mask_text(k) if isinstance(k, str) else k:
                "[masked:secret]" if isinstance(k, str) and isinstance(v, str) and v and _NAME_AT_END.search(k)
                and not v.startswith("[masked:") else mask_json(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [mask_json(v) for v in value]
    return value
