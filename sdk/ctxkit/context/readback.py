"""Key-field read-back: did the required literals reach the model after compression?

API notes
---------
- ``KeyField(label, literal, source=None, key=None)``: a required literal (a negation, a number
  with its unit, a ref) and the item expected to carry it. ``key`` is the evidence key in the
  manifest; it defaults to ``label``.
- ``read_back(fields, outputs) -> list[ReadBack]``: ``outputs`` maps item id -> the text that
  reached the model (e.g. ``Plan.outputs()``). A field is present if its literal occurs in any
  output; ``found_in`` is the expected source when that carries it, else the first item (in
  ``outputs`` order) that does. Matching is on the dedupe normal form (NFKC, casefold, collapsed
  whitespace), and a literal that starts or ends with a letter or digit must not touch another
  ASCII letter or digit there: ``429`` is not found in ``14290`` and ``0.0321`` not in ``0.03215``.
- ``to_evidence(results) -> list[ctxkit.manifest.Evidence]`` (key, label, literal,
  expected_item, present, found_in).
- ``summarize(results) -> str`` ("6/10 kept; missing: a, b") and ``format_readback(results)``
  (one ``[OK  ]`` / ``[MISS]`` line per field).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ctxkit.context.operators import normalize
from ctxkit.manifest import Evidence


@dataclass(frozen=True, slots=True)
class KeyField:
    label: str
    literal: str
    source: str | None = None
    key: str | None = None

    @property
    def evidence_key(self) -> str:
        return self.key or self.label


@dataclass(frozen=True, slots=True)
class ReadBack:
    field: KeyField
    present: bool
    found_in: str | None


@functools.lru_cache(maxsize=1024)  # the same key fields at every call: normalize and compile once
def _pattern(literal: str) -> tuple[str, re.Pattern[str]]:
    """The literal's normal form, and the pattern that matches it where its edges touch no
    ASCII letter or digit."""
    norm = normalize(literal)
    head = r"(?<![0-9a-z])" if norm[:1].isascii() and norm[:1].isalnum() else ""
    tail = r"(?![0-9a-z])" if norm[-1:].isascii() and norm[-1:].isalnum() else ""
    return norm, re.compile(head + re.escape(norm) + tail)


# Normal forms of the texts read back, kept across calls (an agent reads back mostly the same
# texts at every step); bounded by entries, emptied whole when full.
_NORMAL: dict[str, str] = {}
_NORMAL_MAX = 20_000


def _normal(text: str) -> str:
    found = _NORMAL.get(text)
    if found is None:
        if len(_NORMAL) >= _NORMAL_MAX:
            _NORMAL.clear()
        found = _NORMAL[text] = normalize(text)
    return found


def _carries(text: str | None, norm: str, pattern: re.Pattern[str]) -> bool:
    """Whether ``text`` (a normal form) holds the literal; the substring test first, as most do not."""
    return text is not None and norm in text and pattern.search(text) is not None


def read_back(fields: Iterable[KeyField], outputs: Mapping[str, str]) -> list[ReadBack]:
    """Which key fields survive in which outputs."""
    texts = {item: _normal(text) for item, text in outputs.items() if text}
    results: list[ReadBack] = []
    for f in fields:
        if not f.literal.strip():
            raise ValueError(f"key field {f.label!r} has an empty literal")
        norm, pattern = _pattern(f.literal)
        if f.source is not None and _carries(texts.get(f.source), norm, pattern):
            found: str | None = f.source
        else:  # the first output that carries it
            found = next((item for item, text in texts.items() if _carries(text, norm, pattern)), None)
        results.append(ReadBack(field=f, present=found is not None, found_in=found))
    return results


def to_evidence(results: Sequence[ReadBack]) -> list[Evidence]:
    return [
        Evidence(
            key=r.field.evidence_key,
            label=r.field.label,
            literal=r.field.literal,
            expected_item=r.field.source,
            present=r.present,
            found_in=r.found_in,
        )
        for r in results
    ]


def summarize(results: Sequence[ReadBack]) -> str:
    kept = sum(1 for r in results if r.present)
    missing = [r.field.label for r in results if not r.present]
    tail = f"missing: {', '.join(missing)}" if missing else "none missing"
    return f"{kept}/{len(results)} kept; {tail}"


def format_readback(results: Sequence[ReadBack]) -> str:
    lines = []
    for r in results:
        mark = "[OK  ]" if r.present else "[MISS]"
        where = f"@{r.found_in or r.field.source or '?'}"
        lines.append(f"  {mark} {r.field.label:<16} {r.field.literal:<28} {where}")
    lines.append(f"  read-back: {summarize(results)}")
    return "\n".join(lines)
