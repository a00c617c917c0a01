"""The prefix line diff: which lines of which prefix segment differ between two calls.

Reads the optional ``lines`` (line hashes) and ``text`` of ``prefix.segments[]`` (see
docs/manifest.md). Used by one template partial, templates/manifests/_prefix_line_diff.html,
on the cache view's regression cards, the overview's regressions and the call view; and by
the cache analysis, whose cause details name the line, tool or message that changed
(manifests/analysis/cache_words.py).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

MAX_ROWS = 12  # lines shown per comparison; the rest are counted
MAX_LINE_CHARS = 240


@dataclass
class LineChange:
    segment: str
    line: int  # 1-based, in the newer prefix (in the older one for a removed line)
    change: str  # "changed", "added", "removed"
    before: str | None = None  # the line's text when both calls recorded text, else None
    after: str | None = None
    before_line: int | None = None  # 1-based, in the older prefix, for a changed or removed line


@dataclass
class LineDiff:
    rows: list[LineChange] = field(default_factory=list)
    more: int = 0  # changed lines beyond MAX_ROWS
    unlined: list[str] = field(default_factory=list)  # changed segments without line hashes
    text_withheld: bool = False

    @property
    def empty(self) -> bool:
        return not self.rows and not self.unlined


def segment_lines(segment: dict[str, Any]) -> tuple[list[str] | None, list[str] | None]:
    """A stored segment's line hashes (None without them) and its lines of text (None when
    the text was withheld, or numbers other lines than the hashes)."""
    hashes = segment.get("lines")
    text = segment.get("text")
    if not isinstance(hashes, list):
        return None, None
    lines = text.split("\n") if isinstance(text, str) else None
    if lines is not None and len(lines) != len(hashes):
        # Past MAX_LINES the last hash covers the rest: number lines, do not quote them.
        lines = lines[: len(hashes)] if len(lines) > len(hashes) else None
    return hashes, lines


def _clip(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def line_diff(before: list[dict[str, Any]] | None, after: list[dict[str, Any]] | None) -> LineDiff:
    """Lines that differ, segment by segment (matched by name), between two prefixes."""
    out = LineDiff()
    if not before or not after:
        return out
    old = {s.get("name"): s for s in before if isinstance(s, dict)}
    changes: list[LineChange] = []
    for seg in after:
        if not isinstance(seg, dict):
            continue
        name = str(seg.get("name") or "")
        prev = old.get(name)
        if prev is None or prev.get("hash") == seg.get("hash"):
            continue
        old_hashes, old_text = segment_lines(prev)
        new_hashes, new_text = segment_lines(seg)
        if old_hashes is None or new_hashes is None:
            out.unlined.append(name)
            continue
        if old_text is None or new_text is None:
            out.text_withheld = True
        matcher = difflib.SequenceMatcher(None, old_hashes, new_hashes, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                continue
            paired = min(i2 - i1, j2 - j1) if op == "replace" else 0
            for k in range(paired):
                changes.append(LineChange(name, j1 + k + 1, "changed",
                                          _clip(old_text[i1 + k]) if old_text else None,
                                          _clip(new_text[j1 + k]) if new_text else None, i1 + k + 1))
            for j in range(j1 + paired, j2):
                changes.append(LineChange(name, j + 1, "added", None, _clip(new_text[j]) if new_text else None))
            for i in range(i1 + paired, i2):
                changes.append(LineChange(name, i + 1, "removed", _clip(old_text[i]) if old_text else None, None,
                                          i + 1))
    out.rows, out.more = changes[:MAX_ROWS], max(0, len(changes) - MAX_ROWS)
    return out
