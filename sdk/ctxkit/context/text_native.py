"""The optional native accelerator of the allocator's first-seen text facts (``ctxkit._speedups``).

``alloc_cache.facts_many`` hands the texts it has not seen to :func:`text_facts`, which returns
the facts the C module worked out (one pass per text: fold, whitespace collapse, content key,
CJK count, JSON-likeness, line dedupe) and the texts it left to the pure-Python path. The C
module handles a text only when every character is one whose NFKC + casefold is a character of
its own, known from the table below: ASCII, and the BMP characters that are their own NFKC form
(caseless, not whitespace, not a mark, so nothing composes across them) or whose NFKC form is one
ASCII character (fullwidth forms, U+3000 and the other spaces NFKC makes ASCII). Anything else
(astral characters, lone surrogates, cased non-ASCII, combining marks, other compatibility forms)
takes the Python path, which stays the definition: sdk/tests/test_speedups.py checks that both
give the same facts.

The accelerator is used when the module was built (``pip install -e sdk`` with a C compiler;
setup.py marks it optional) and the environment variable ``CTXKIT_PURE_PYTHON`` is unset or
``0``; :func:`use_native` switches it at run time (tests run both paths).

``text_facts(texts, wanted) -> (made, rest)``; ``available() -> bool``; ``use_native(on) -> bool``;
``table(version=None) -> (flags, image)``; ``build_table(candidates) -> (flags, image)``.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Hashable, Sequence
from typing import Any

try:
    # The extension module itself, not ``from ctxkit import``: that would make this module depend
    # on the package's __init__, which imports the allocator, which imports this (an import circle).
    import ctxkit._speedups as _speedups  # type: ignore[import-not-found]
except ImportError:  # not built (no compiler at install time): the pure-Python path does it all
    _speedups = None

# flags[c] bits, as _speedups.c reads them: handled, CJK (the estimator's class), str.isspace() of
# the character, folds to the one ASCII character image[c] (else to itself), folds to whitespace.
HANDLED, CJK, SPACE, TO_ASCII, FOLDS_TO_SPACE = 1, 2, 4, 8, 16

# 256-character blocks the table covers (the rest of the BMP is left to Python): Latin-1, general
# punctuation, CJK symbols and kana, CJK ideographs, Yi, hangul syllables, compatibility
# ideographs, fullwidth and halfwidth forms.
CANDIDATE_BLOCKS = (0x00, 0x20, 0x30, *range(0x34, 0xA5), *range(0xAC, 0xD8), 0xF9, 0xFA, 0xFF)

# The table for the Unicode database of Python 3.11 (14.0.0), as runs (first character, flags,
# image - character) over U+0080-FFFF, worked out by build_table (a test checks it still is).
# Another version of the database is worked out again, once, when first needed (~0.2 s).
_TABLE_UNICODE = "14.0.0"
_RUNS_14 = (
    (0x0080, 1, 0), (0x0085, 0, 0), (0x0086, 1, 0), (0x00A0, 13, -128), (0x00A1, 1, 0), (0x00A8, 0, 0),
    (0x00A9, 1, 0), (0x00AA, 9, -73), (0x00AB, 1, 0), (0x00AF, 0, 0), (0x00B0, 1, 0), (0x00B2, 9, -128),
    (0x00B4, 0, 0), (0x00B6, 1, 0), (0x00B8, 0, 0), (0x00B9, 9, -136), (0x00BA, 9, -75), (0x00BB, 1, 0),
    (0x00BC, 0, 0), (0x00BF, 1, 0), (0x00C0, 0, 0), (0x00D7, 1, 0), (0x00D8, 0, 0), (0x00E0, 1, 0), (0x0100,
    0, 0), (0x2000, 13, -8160), (0x2001, 13, -8161), (0x2002, 13, -8162), (0x2003, 13, -8163), (0x2004, 13,
    -8164), (0x2005, 13, -8165), (0x2006, 13, -8166), (0x2007, 13, -8167), (0x2008, 13, -8168), (0x2009, 13,
    -8169), (0x200A, 13, -8170), (0x200B, 1, 0), (0x2011, 0, 0), (0x2012, 1, 0), (0x2017, 0, 0), (0x2018, 1,
    0), (0x2024, 9, -8182), (0x2025, 0, 0), (0x2027, 1, 0), (0x2028, 0, 0), (0x202A, 1, 0), (0x202F, 13,
    -8207), (0x2030, 1, 0), (0x2033, 0, 0), (0x2035, 1, 0), (0x2036, 0, 0), (0x2038, 1, 0), (0x203C, 0, 0),
    (0x203D, 1, 0), (0x203E, 0, 0), (0x203F, 1, 0), (0x2047, 0, 0), (0x204A, 1, 0), (0x2057, 0, 0), (0x2058,
    1, 0), (0x205F, 13, -8255), (0x2060, 1, 0), (0x2070, 9, -8256), (0x2071, 9, -8200), (0x2072, 1, 0),
    (0x2074, 9, -8256), (0x207A, 9, -8271), (0x207B, 0, 0), (0x207C, 9, -8255), (0x207D, 9, -8277), (0x207F,
    9, -8209), (0x2080, 9, -8272), (0x208A, 9, -8287), (0x208B, 0, 0), (0x208C, 9, -8271), (0x208D, 9, -8293),
    (0x208F, 1, 0), (0x2090, 9, -8239), (0x2091, 9, -8236), (0x2092, 9, -8227), (0x2093, 9, -8219), (0x2094,
    0, 0), (0x2095, 9, -8237), (0x2096, 9, -8235), (0x209A, 9, -8234), (0x209B, 9, -8232), (0x209D, 1, 0),
    (0x20A8, 0, 0), (0x20A9, 1, 0), (0x20D0, 0, 0), (0x20F1, 1, 0), (0x2100, 0, 0), (0x3000, 15, -12256),
    (0x3001, 3, 0), (0x302A, 0, 0), (0x3030, 3, 0), (0x3036, 0, 0), (0x3037, 3, 0), (0x3038, 0, 0), (0x303B,
    3, 0), (0x3099, 0, 0), (0x309D, 3, 0), (0x309F, 0, 0), (0x30A0, 3, 0), (0x30FF, 0, 0), (0x3400, 3, 0),
    (0x4DC0, 1, 0), (0x4E00, 3, 0), (0xA000, 1, 0), (0xA500, 0, 0), (0xAC00, 3, 0), (0xD7B0, 1, 0), (0xD800,
    0, 0), (0xFA0E, 3, 0), (0xFA10, 0, 0), (0xFA11, 3, 0), (0xFA12, 0, 0), (0xFA13, 3, 0), (0xFA15, 0, 0),
    (0xFA1F, 3, 0), (0xFA20, 0, 0), (0xFA21, 3, 0), (0xFA22, 0, 0), (0xFA23, 3, 0), (0xFA25, 0, 0), (0xFA27,
    3, 0), (0xFA2A, 0, 0), (0xFA6E, 3, 0), (0xFA70, 0, 0), (0xFADA, 3, 0), (0xFB00, 0, 0), (0xFF00, 3, 0),
    (0xFF01, 11, -65248), (0xFF21, 11, -65216), (0xFF3B, 11, -65248), (0xFF5F, 0, 0), (0xFFBF, 3, 0), (0xFFC2,
    0, 0), (0xFFC8, 3, 0), (0xFFCA, 0, 0), (0xFFD0, 3, 0), (0xFFD2, 0, 0), (0xFFD8, 3, 0), (0xFFDA, 0, 0),
    (0xFFDD, 3, 0), (0xFFE0, 0, 0), (0xFFE7, 3, 0), (0xFFE8, 0, 0), (0xFFEF, 3, 0), (0xFFF0, 1, 0)
)

# The estimator's CJK class (tokens._CJK) over the BMP, as ranges.
_CJK_RANGES = ((0x1100, 0x11FF), (0x3000, 0x303F), (0x3040, 0x30FF), (0x3100, 0x312F), (0x3130, 0x318F),
               (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF), (0xF900, 0xFAFF),
               (0xFF00, 0xFFEF))


def _ascii_part(flags: bytearray, image: bytearray) -> None:
    for c in range(128):
        ch = chr(c)
        flags[c] = HANDLED | TO_ASCII | (SPACE if ch.isspace() else 0)
        image[c] = ord(ch.lower())  # casefold is lower() on ASCII


def _finish(flags: bytearray, image: bytearray) -> tuple[bytes, bytes]:
    """Mark the characters that fold to ASCII whitespace (what the collapse splits at)."""
    to_ascii = bytes(flags).translate(bytes(1 if b & TO_ASCII else 0 for b in range(256)))
    c = to_ascii.find(1)
    while c >= 0:  # a few hundred characters
        if chr(image[c]).isspace():
            flags[c] |= FOLDS_TO_SPACE
        c = to_ascii.find(1, c + 1)
    return bytes(flags), bytes(image)


def _char_class(c: int) -> tuple[int, int]:
    """(flags, image) of one non-ASCII BMP character by the running Unicode database."""
    ch = chr(c)
    if 0xD800 <= c < 0xE000 or unicodedata.combining(ch) or unicodedata.category(ch)[0] == "M":
        return 0, 0  # surrogates; marks (every character NFKC may compose with a predecessor is one)
    if 0x1100 <= c < 0x1200:  # hangul jamo: compose with each other although not marks
        return 0, 0
    cjk = CJK if any(lo <= c <= hi for lo, hi in _CJK_RANGES) else 0
    nfkc = unicodedata.normalize("NFKC", ch)
    if nfkc == ch:
        if ch.casefold() != ch or ch.isspace():
            return 0, 0
        return HANDLED | cjk, 0
    if len(nfkc) == 1 and nfkc.isascii() and nfkc != "\n":
        return HANDLED | TO_ASCII | cjk | (SPACE if ch.isspace() else 0), ord(nfkc.casefold())
    return 0, 0


def build_table(candidates: Sequence[int] = CANDIDATE_BLOCKS) -> tuple[bytes, bytes]:
    """The (flags, image) tables of the C module, worked out from the running Unicode database
    over the ``candidates`` blocks (other characters are not handled)."""
    flags, image = bytearray(65536), bytearray(65536)
    _ascii_part(flags, image)
    for block in candidates:
        for c in range(max(block * 256, 128), block * 256 + 256):
            flags[c], image[c] = _char_class(c)
    return _finish(flags, image)


def _from_runs(runs: Sequence[tuple[int, int, int]]) -> tuple[bytes, bytes]:
    flags, image = bytearray(65536), bytearray(65536)
    _ascii_part(flags, image)
    ends = [start for start, _, _ in runs[1:]] + [65536]
    for (start, flag, delta), end in zip(runs, ends, strict=True):
        if flag:
            flags[start:end] = bytes([flag]) * (end - start)
        if delta:
            for c in range(start, end):
                image[c] = c + delta
    return _finish(flags, image)


def table(version: str | None = None) -> tuple[bytes, bytes]:
    """The tables for this Unicode database: the built-in runs under 14.0.0, else worked out."""
    if (version or unicodedata.unidata_version) == _TABLE_UNICODE:
        return _from_runs(_RUNS_14)
    return build_table()


def available() -> bool:
    """Whether the C module was built and loads here."""
    return _speedups is not None


_enabled = _speedups is not None and os.environ.get("CTXKIT_PURE_PYTHON", "") in ("", "0")
_configured = False


def use_native(on: bool) -> bool:
    """Switch the accelerator on or off (on only where it is available); returns the previous state."""
    global _enabled
    previous = _enabled
    _enabled = bool(on) and _speedups is not None
    return previous


def enabled() -> bool:
    return _enabled


def facts_many(entries: dict[Hashable, tuple[int, Any]], texts: list[str], repeats: list[bool], facts_type: type,
               min_chars: int = 16) -> tuple[list[Any], dict[Hashable, tuple[int, Any]], list[str], list[bool]]:
    """``alloc_cache.facts_many``'s loop in C: ``(out, made, rest, rest_wanted)``. ``out[i]``: the
    facts of ``texts[i]`` from ``entries`` (the cache's dict) or made here (also in ``made``, as the
    cache's ``(size, facts)`` entries), or None for a text left to Python (in ``rest``, with
    whether its line dedupe is wanted in ``rest_wanted``). Only while :func:`enabled`."""
    _configure(facts_type)
    return _speedups.facts_many(entries, texts, repeats, min_chars)  # type: ignore[union-attr,no-any-return]


def _configure(facts_type: type) -> None:
    global _configured
    if not _configured:
        _speedups.configure(*table(), facts_type, hashlib.sha256)  # type: ignore[union-attr]
        _configured = True


def text_facts(texts: list[str], wanted: list[bool], facts_type: type, min_chars: int = 16
               ) -> tuple[dict[Hashable, tuple[int, Any]], list[str]]:
    """``({text: (len(text) + 1, facts)}, texts left to Python)``; everything left when switched off."""
    if not _enabled:
        return {}, texts
    _configure(facts_type)
    return _speedups.text_facts(texts, wanted, min_chars)  # type: ignore[union-attr,no-any-return]
