"""The allocator's two records: a candidate (:class:`Segment`) and what was done with it (:class:`Allocation`).

Their own module so that :mod:`ctxkit.context.allocator` and the modules it delegates to
(:mod:`ctxkit.context.allocator.apply`, :mod:`ctxkit.context.allocator.share`) all import them from
here, and none of those imports another in a circle. ``ctxkit.context.allocator`` re-exports
both; the allocator's docstring describes their fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from ctxkit.context.operators.common import OpRecord
from ctxkit.manifest import ITEM_KINDS, POLICIES, Action, Item, ItemAllocation, ItemKind, Policy, Trust, Zone


@dataclass(frozen=True, slots=True)
class Segment:
    """One candidate for the context.

    ``priority`` is a weight (value / replaceability), 0..1000 as in the manifest;
    ``trust`` is separate from it on purpose (a web page can matter and still be only data).
    ``keep_recent``: lines kept verbatim by ``summarize``; maximum turns for ``window`` (0 = as
    many as fit). ``pinned_lines``: lines that ``extract``/``summarize``/``window`` keep first;
    for ``schema``, the names of tools that are never dropped (kept at least in their minimal form).
    ``why``: for ``ref``, why the reference matters.
    """

    name: str
    kind: ItemKind
    text: str
    priority: int = 50
    policy: Policy = "truncate"
    min_tokens: int = 0
    trust: Trust = "trusted"
    source_ref: str | None = None
    zone: Zone | None = None
    dedupe: bool = True
    near_dupes: bool = False
    keep_recent: int = 3
    head_ratio: float = 0.55
    pinned_lines: tuple[str, ...] = ()
    why: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("segment name must not be empty")
        if self.kind not in ITEM_KINDS:
            raise ValueError(f"segment {self.name!r}: kind {self.kind!r} is not one of {ITEM_KINDS}")
        if self.policy not in POLICIES:
            raise ValueError(f"segment {self.name!r}: policy {self.policy!r} is not one of {POLICIES}")
        if not 0 <= self.priority <= 1000:
            raise ValueError(f"segment {self.name!r}: priority must be in 0..1000")
        if self.min_tokens < 0 or self.keep_recent < 0:
            raise ValueError(f"segment {self.name!r}: min_tokens and keep_recent must be >= 0")
        if not 0.0 < self.head_ratio < 1.0:
            raise ValueError(f"segment {self.name!r}: head_ratio must be between 0 and 1")

    @property
    def pinned(self) -> bool:
        return self.policy == "pin"


class Allocation(msgspec.Struct, gc=False):
    """What the allocator did with one segment. A mutable struct (the allocator fills in the grant,
    the action and the text as it goes): one is made per segment of every call, and a struct's
    constructor costs a fraction of a dataclass's."""

    name: str
    kind: ItemKind
    policy: Policy
    priority: int
    effective_priority: int
    pinned: bool
    trust: Trust
    zone: Zone | None
    source_ref: str | None
    position: int
    raw_tokens: int
    requested: int
    granted: int = 0
    used: int = 0
    action: Action = "keep"
    reason: str = ""
    text: str = ""
    content_hash: str = ""
    # Tuples, grown by the allocator: an allocation that keeps or drops its text whole (most of
    # them) shares the empty one instead of making two lists.
    operations: tuple[OpRecord, ...] = ()
    merged_sources: tuple[str, ...] = ()
    duplicate_of: str | None = None
    floor: int = 0  # the floor granted first (step 4): min_tokens, for window at least its pinned lines
    lossless: bool = False  # lossless steps (step 2) changed the text before it was counted

    @classmethod
    def of(
        cls, s: Segment, position: int, effective_priority: int, pinned: bool, raw_tokens: int, content_hash: str
    ) -> Allocation:
        """The allocation of ``s`` before anything is granted (what ``allocate`` starts from), its
        fields given in their declared order: one is made per segment of every call."""
        return cls(s.name, s.kind, s.policy, s.priority, effective_priority, pinned, s.trust, s.zone, s.source_ref,
                   position, raw_tokens, 0, content_hash=content_hash)

    def replay_settings(self) -> ItemAllocation:
        """What a replay needs to re-run this allocation (the manifest's ``Item.allocation``)."""
        return ItemAllocation(
            policy=self.policy,
            min_tokens=self.floor,
            effective_priority=self.effective_priority if self.effective_priority != self.priority else None,
            lossless=self.lossless,
        )

    def to_dict(self, include_text: bool = True) -> dict[str, Any]:
        out = {
            "name": self.name,
            "kind": self.kind,
            "policy": self.policy,
            "priority": self.priority,
            "effective_priority": self.effective_priority,
            "pinned": self.pinned,
            "trust": self.trust,
            "zone": self.zone,
            "source_ref": self.source_ref,
            "position": self.position,
            "raw_tokens": self.raw_tokens,
            "requested": self.requested,
            "granted": self.granted,
            "used": self.used,
            "action": self.action,
            "reason": self.reason,
            "content_hash": self.content_hash,
            "operations": [op.to_dict() for op in self.operations],
            "merged_sources": list(self.merged_sources),
            "duplicate_of": self.duplicate_of,
            "floor": self.floor,
        }
        if include_text:
            out["text"] = self.text
        return out

    def to_item(self, include_text: bool = False) -> Item:
        """The manifest Item for this allocation (requested_tokens = after lossless dedupe)."""
        return Item(
            id=self.name,
            kind=self.kind,
            action=self.action,
            requested_tokens=self.requested,
            granted_tokens=self.granted,
            used_tokens=self.used,
            priority=self.priority,
            pinned=self.pinned,
            trust=self.trust,
            zone=self.zone,
            position=self.position,
            reason=self.reason[:2000],
            source_ref=self.source_ref,
            content_hash=self.content_hash or None,
            text=self.text if include_text else None,
        )
