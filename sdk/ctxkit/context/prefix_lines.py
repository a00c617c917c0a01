"""Line hashes of a prefix segment, so a cache miss can be pinned to the line that changed.

A segment's text is split on newlines; each line gets the first 16 hex digits of its
sha256 (collisions between two versions of one line are what matters, and 64 bits make
them negligible). Past ``MAX_LINES`` the last hash covers every remaining line, so a long
segment still changes the last hash when anything beyond the limit changes.
The server's line diff (manifests/selectors/prefix_lines.py) reads these fields.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from ctxkit.manifest import MAX_LINES, MAX_TEXT, PrefixSegment

__all__ = ["line_hash", "line_hashes", "prefix_segment"]


@lru_cache(maxsize=65_536)  # a conversation's later calls send its earlier lines again
def line_hash(line: str) -> str:
    return hashlib.sha256(line.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def line_hashes(text: str) -> list[str]:
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        lines = lines[: MAX_LINES - 1] + ["\n".join(lines[MAX_LINES - 1 :])]
    return [line_hash(line) for line in lines]


def prefix_segment(*, name: str, hash: str, tokens: int, text: str | None, include_text: bool) -> PrefixSegment:
    """A PrefixSegment with line hashes of ``text`` (and the text itself when allowed and not
    too long for the schema; a clipped text would misnumber nothing but mislead the reader)."""
    if text is None:
        return PrefixSegment(name=name, hash=hash, tokens=tokens)
    keep = text if include_text and len(text) <= MAX_TEXT else None
    return PrefixSegment(name=name, hash=hash, tokens=tokens, lines=line_hashes(text), text=keep)
