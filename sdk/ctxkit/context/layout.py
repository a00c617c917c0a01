"""Context layout HEAD / MIDDLE / TAIL and the stable prefix hash.

* HEAD, the stable prefix and cache boundary: system rules, task and hard constraints,
  tool schemas in a fixed (sorted) order. Nothing in it may change from call to call.
* MIDDLE, replaceable content: old tool results, retrieval, history summaries. It is where
  attention is weakest, so only things that can be fetched again by ref belong here.
* TAIL, the current work set: current observation, evidence right before the question, the
  question, and the hard constraints restated from the SAME string (same hash) as in HEAD.

Prompt caching matches the prefix token by token, so the HEAD is serialised stably (JSON
with sorted keys, tools sorted by name) and hashed; one hash per segment pins a cache miss
to the segment that changed. :func:`volatile_warnings` flags per-call values (timestamps,
UUIDs, request ids) that would break the cache on every call.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from ctxkit.context.prefix_lines import prefix_segment
from ctxkit.context.tokens import Estimate, resolve_estimate
from ctxkit.manifest import MAX_SEGMENTS, Prefix

Zone = Literal["head", "middle", "tail"]
ZONES: tuple[Zone, ...] = ("head", "middle", "tail")

# Default zone of each manifest item kind; ``Block.zone`` or ``Block.current`` override it.
_HEAD_KINDS = frozenset({"system", "task", "constraint", "tools"})
_TAIL_KINDS = frozenset({"user", "state"})
# Order inside HEAD: rules, then task and constraints, then tools.
_HEAD_RANK = {"system": 0, "task": 1, "constraint": 1, "tools": 2}
# Order inside TAIL: current work, evidence next to the question, the question, restated constraints.
_TAIL_RANK = {"state": 0, "tool_result": 0, "retrieval": 1, "user": 2, "constraint": 3, "task": 3}


class Block(NamedTuple):
    """One piece of context. ``data`` is structured content (a tool schema) serialised with
    sorted keys; ``name`` sorts tools (defaults to ``data["name"]``, then the id). A named tuple,
    like :class:`Placed`: immutable, and quick to make (a build makes one per segment)."""

    id: str
    kind: str
    text: str = ""
    data: Any = None
    name: str | None = None
    zone: Zone | None = None
    current: bool = False
    segment: str | None = None
    restate: bool | None = None
    restates: str | None = None

    @property
    def sort_name(self) -> str:
        if self.name:
            return self.name
        name = self.data.get("name") if isinstance(self.data, dict) else None
        return name if isinstance(name, str) else self.id

    def default_zone(self) -> Zone:
        if self.zone is not None:
            return self.zone
        if self.current or self.restates or self.kind in _TAIL_KINDS:
            return "tail"
        return "head" if self.kind in _HEAD_KINDS else "middle"

    def payload(self) -> dict[str, Any]:
        """What the model sees of the block: text and data, never the id."""
        payload: dict[str, Any] = {"text": self.text}
        if self.data is not None:
            payload["data"] = self.data
        return payload

    def serialise(self) -> str:
        """Canonical form of :meth:`payload` (sorted keys, no spaces)."""
        return canonical_json(self.payload())

    def tokens(self, estimate: Estimate) -> int:
        data = estimate(canonical_json(self.data)) if self.data is not None else 0
        return estimate(self.text) + data


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Placed(NamedTuple):
    """A block at its place: zone, position in the whole context (0-based), tokens, hash. A named
    tuple: immutable, and quicker to make than a frozen dataclass (one per block of every build)."""

    block: Block
    zone: Zone
    position: int
    tokens: int
    restated_from: str | None = None

    @property
    def content_hash(self) -> str:
        """sha256 of the block's canonical form; computed when asked for (most blocks of a large
        context are never asked: their manifest item carries the candidate's own hash)."""
        return sha256_hex(self.block.serialise())

    @property
    def id(self) -> str:
        return self.block.id


@dataclass(frozen=True, slots=True)
class Segment:
    name: str
    hash: str
    tokens: int
    block_ids: list[str]
    text: str = ""  # what the model reads of the segment, line by line (for the prefix line diff)


@dataclass(frozen=True, slots=True)
class Layout:
    placed: list[Placed]
    segments: list[Segment]
    prefix_hash: str
    prefix_tokens: int
    head_serialisation: str
    warnings: list[str]

    def zone(self, zone: Zone) -> list[Placed]:
        return [p for p in self.placed if p.zone == zone]

    @property
    def head(self) -> list[Placed]:
        return self.zone("head")

    @property
    def middle(self) -> list[Placed]:
        return self.zone("middle")

    @property
    def tail(self) -> list[Placed]:
        return self.zone("tail")

    def positions(self) -> dict[str, tuple[Zone, int]]:
        """Block id -> (zone, position), for the manifest's Item.zone / Item.position.

        A restated constraint appears twice; its id maps to the HEAD place and the copy's
        id (``<id>#restated``) to the TAIL place.
        """
        return {p.id: (p.zone, p.position) for p in self.placed}

    def text(self, separator: str = "\n\n") -> str:
        return separator.join(p.block.text for p in self.placed if p.block.text)

    def to_prefix(self, *, include_text: bool = True) -> Prefix:
        """The manifest's prefix: per segment its hash, tokens and line hashes, and its text
        when ``include_text`` (the server then shows the changed line itself, not only its number)."""
        segments = [
            prefix_segment(name=s.name, hash=s.hash, tokens=s.tokens, text=s.text, include_text=include_text)
            for s in self.segments
        ]
        return Prefix(hash=self.prefix_hash, tokens=self.prefix_tokens, segments=segments[:MAX_SEGMENTS])


def arrange(blocks: Iterable[Block], *, estimate: Estimate | None = None, restate_constraints: bool = True) -> Layout:
    """Place ``blocks`` into HEAD / MIDDLE / TAIL and hash the HEAD.

    Within HEAD: system, then task/constraints, then tools sorted by name (so the order the
    caller lists tools in does not change the hash). MIDDLE keeps the caller's order. TAIL:
    current work, evidence, the question, then restated constraints. With
    ``restate_constraints`` each HEAD ``constraint`` block (or any block with
    ``restate=True``) is repeated verbatim at the end of TAIL from the same string.
    """
    estimate = resolve_estimate(estimate)
    blocks = list(blocks)
    ids = [b.id for b in blocks]
    if len(set(ids)) != len(ids):
        raise ValueError("block ids must be unique")
    by_zone: dict[Zone, list[Block]] = {z: [] for z in ZONES}
    for block in blocks:
        by_zone[block.zone if block.zone is not None else block.default_zone()].append(block)

    head = sorted(by_zone["head"], key=lambda b: (_HEAD_RANK.get(b.kind, 1), b.sort_name if b.kind == "tools" else ""))
    restated: list[tuple[Block, str]] = []
    for block in head:
        wanted = block.restate if block.restate is not None else block.kind == "constraint"
        if restate_constraints and wanted:
            copy = Block(id=f"{block.id}#restated", kind=block.kind, text=block.text, data=block.data, zone="tail")
            restated.append((copy, block.id))
    tail = sorted(by_zone["tail"], key=lambda b: _TAIL_RANK.get(b.kind, 0))  # stable: ties keep caller order

    placed: list[Placed] = []
    ordered: list[tuple[Block, Zone, str | None]] = [(b, "head", None) for b in head]
    ordered += [(b, "middle", None) for b in by_zone["middle"]]
    ordered += [(b, "tail", None) for b in tail] + [(b, "tail", src) for b, src in restated]
    for position, (block, zone, source) in enumerate(ordered):
        placed.append(Placed(block, zone, position, block.tokens(estimate), source))

    head_placed = [p for p in placed if p.zone == "head"]
    segments = _segments(head_placed)
    # The prefix hash covers the HEAD contents in order, grouped by segment; block ids are
    # not part of it because they are never sent to the model.
    by_id = {p.id: p for p in head_placed}
    head_serialisation = canonical_json(
        [{"segment": s.name, "blocks": [by_id[i].block.payload() for i in s.block_ids]} for s in segments]
    )
    return Layout(
        placed=placed,
        segments=segments,
        prefix_hash=sha256_hex(head_serialisation),
        prefix_tokens=sum(s.tokens for s in segments),
        head_serialisation=head_serialisation,
        warnings=_warnings(placed),
    )


def _segments(head: Sequence[Placed]) -> list[Segment]:
    """Consecutive HEAD blocks with the same segment name (default: their kind) form a segment."""
    groups: list[tuple[str, list[Placed]]] = []
    for p in head:
        name = p.block.segment or p.block.kind
        if groups and groups[-1][0] == name:
            groups[-1][1].append(p)
        else:
            groups.append((name, [p]))
    return [
        Segment(
            name=name,
            # Hash the canonical contents in order; ids are not sent to the model.
            hash=sha256_hex(canonical_json([p.block.payload() for p in members])),
            tokens=sum(p.tokens for p in members),
            block_ids=[p.id for p in members],
            text="\n".join(_block_text(p.block) for p in members),
        )
        for name, members in groups
    ]


def _block_text(block: Block) -> str:
    if block.data is None:
        return block.text
    return f"{block.text}\n{canonical_json(block.data)}" if block.text else canonical_json(block.data)


def _warnings(placed: Sequence[Placed]) -> list[str]:
    warnings: list[str] = []
    by_id = {p.block.id: p for p in placed} if any(p.block.restates is not None for p in placed) else {}
    for p in placed:
        if p.zone == "head":
            # Scan the raw text, not its JSON form: escaping turns "\n2026-..." into "\\n2026-...",
            # where the date no longer starts at a word boundary.
            data = canonical_json(p.block.data) if p.block.data is not None else ""
            for warning in volatile_warnings(p.block.text + "\n" + data):
                warnings.append(f"head block {p.id!r}: {warning}")
            if p.block.kind in _TAIL_KINDS:
                warnings.append(f"head block {p.id!r} is {p.block.kind!r} content, which changes every call")
        source_id = p.block.restates
        if source_id is not None:
            source = by_id.get(source_id)
            if source is None:
                warnings.append(f"block {p.id!r} restates {source_id!r}, which is not in the context")
            elif source.content_hash != p.content_hash:
                warnings.append(
                    f"block {p.id!r} restates {source_id!r} with different text: the two copies have drifted"
                )
    return warnings


# --------------------------------------------------------------------------- #
# Volatile values in the prefix

_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
_VOLATILE: list[tuple[str, re.Pattern[str]]] = [
    ("a timestamp", re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")),
    ("an ISO date", re.compile(r"\b\d{4}-\d{2}-\d{2}\b")),
    ("a date", re.compile(r"\b\d{4}/\d{1,2}/\d{1,2}\b|\b\d{4}年\d{1,2}月\d{1,2}日")),
    ("a date", re.compile(rf"\b{_MONTHS} \d{{1,2}},? \d{{4}}\b|\b\d{{1,2}} {_MONTHS} \d{{4}}\b")),
    ("a time of day", re.compile(r"(?<![\w:.])\d{1,2}:\d{2}(?::\d{2})?(?:\s?[AaPp][Mm])?(?![\w:])")),
    ("a unix epoch", re.compile(r"(?<![\w.])1[5-9]\d{8}(?:\d{3})?(?![\w.])")),
    ("a UUID", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),
    ("a long hex id", re.compile(r"\b(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{16,}\b")),
    (
        "a request/session id",
        re.compile(
            r"\b(?:req|msg|chatcmpl|resp|run|sess|call|toolu|trace)[_-][A-Za-z0-9]{8,}\b"
            r"|\b(?:request|session|trace|conversation|run)[ _-]?id\s*[:=]\s*\S+",
            re.IGNORECASE,
        ),
    ),
    ("the current date or time", re.compile(r"\b(?:today is|current (?:date|time)|now is)\b|今天是|当前时间", re.I)),
]


def volatile_warnings(text: str) -> list[str]:
    """Per-call values in ``text`` that would break a prompt-cache prefix every call.

    One plain-words warning per distinct value found (timestamps, ISO dates, times,
    unix epochs, UUIDs, long hex ids, request/session ids, "today is ...").
    """
    known = _VOLATILE_SEEN.get(text)
    if known is not None:  # the HEAD is the same text call after call: scan it once
        return list(known)
    if len(_VOLATILE_SEEN) >= 1024:
        _VOLATILE_SEEN.clear()
    found = _VOLATILE_SEEN[text] = tuple(_scan_volatile(text))
    return list(found)


_VOLATILE_SEEN: dict[str, tuple[str, ...]] = {}


def volatile_matches(text: str) -> list[tuple[str, str, int]]:
    """Each per-call value in ``text`` as ``(label, value, offset)``, widest match first where
    two overlap (a timestamp also contains a date and a time: only the timestamp is reported)."""
    found: list[tuple[str, str, int]] = []
    covered: list[tuple[int, int]] = []
    for label, pattern in _VOLATILE:
        for match in pattern.finditer(text):
            start, end = match.span()
            if any(s <= start and end <= e for s, e in covered):
                continue
            covered.append((start, end))
            found.append((label, match.group(0), start))
    return found


def _scan_volatile(text: str) -> list[str]:
    return [
        f"prefix holds {label} {value!r}: it changes between calls and breaks the prompt cache; move it to the tail"
        for label, value, _ in volatile_matches(text)
    ]
