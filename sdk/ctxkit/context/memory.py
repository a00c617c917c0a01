"""Memory write-back with supersedes.

A fact is never overwritten in place: a newer value is appended as a new fact that
``supersedes`` the older one, so an audit shows why it changed and a rollback finds the old
value. Only the current facts (not superseded) become candidates for the context; the
manifest records which fact replaced which (``Item.supersedes`` on the new one, a ``drop``
item saying "superseded by ..." for the old one).

Who may replace whom follows this default order, highest first: ``system`` (safety
rules), ``user`` (the current turn's explicit instruction), ``task`` (the task's hard
constraints), ``tool`` (a verified tool or world fact), ``preference`` (long-term memory),
``inference`` (the model's own; never written back alone). A write whose source ranks below
the current fact's does not replace it: it is kept as a conflict, visible in the manifest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from ctxkit.context.tokens import Estimator, estimate_tokens
from ctxkit.record.manifest import MAX_REASON, Item, Manifest

if TYPE_CHECKING:
    from ctxkit.context.allocator import Segment

Authority = Literal["system", "user", "task", "tool", "preference", "inference"]
AUTHORITY: tuple[str, ...] = ("system", "user", "task", "tool", "preference", "inference")  # highest first


@dataclass(frozen=True, slots=True)
class Fact:
    """One written-back fact (key, value, previous, source, observed_at, supersedes)."""

    id: str
    key: str
    value: str
    authority: Authority = "tool"
    source: str = ""
    observed_at: datetime | None = None
    supersedes: str | None = None
    previous: str | None = None
    conflicts_with: str | None = None  # set when a lower-authority write lost against the current fact

    @property
    def text(self) -> str:
        src = f" (source: {self.source})" if self.source else ""
        return f"{self.key}: {self.value}{src}"


@dataclass
class Memory:
    """An append-only fact ledger; :meth:`current` is what a context may show."""

    facts: list[Fact] = field(default_factory=list)

    def write(self, key: str, value: str, *, authority: Authority = "tool", source: str = "",
              observed_at: datetime | None = None, supersedes: str | None = None, fact_id: str | None = None) -> Fact:
        """Append a fact. It supersedes ``supersedes`` (a fact id) or else the current fact of
        the same key, unless that one has higher authority (then it is kept as a conflict)."""
        if authority not in AUTHORITY:
            raise ValueError(f"authority must be one of {AUTHORITY}")
        if authority == "inference":
            raise ValueError("a model inference is not written back alone: verify it first")
        by_id = {f.id: f for f in self.facts}
        if supersedes is not None and supersedes not in by_id:
            raise ValueError(f"supersedes {supersedes!r}: no such fact")
        older = by_id[supersedes] if supersedes is not None else self.current_fact(key)
        fid = fact_id or "mem_" + hashlib.sha256(f"{len(self.facts)}\x1f{key}\x1f{value}".encode()).hexdigest()[:8]
        if fid in by_id:
            raise ValueError(f"fact id {fid!r} already used")
        if older is not None and AUTHORITY.index(authority) > AUTHORITY.index(older.authority):
            fact = Fact(fid, key, value, authority, source, observed_at, conflicts_with=older.id)
        else:
            fact = Fact(fid, key, value, authority, source, observed_at,
                        supersedes=older.id if older else None, previous=older.value if older else None)
        self.facts.append(fact)
        return fact

    def superseded_by(self) -> dict[str, str]:
        """Old fact id -> the id of the fact that replaced it."""
        return {f.supersedes: f.id for f in self.facts if f.supersedes is not None}

    def current(self) -> list[Fact]:
        """Facts neither replaced nor lost in a conflict, in write order."""
        gone = self.superseded_by()
        return [f for f in self.facts if f.id not in gone and f.conflicts_with is None]

    def current_fact(self, key: str) -> Fact | None:
        found = [f for f in self.current() if f.key == key]
        return found[-1] if found else None

    def segments(self, *, priority: int = 50, policy: str = "extract", min_tokens: int = 0) -> list[Segment]:
        """One allocator ``Segment`` per current fact (name = fact id, kind ``memory``)."""
        from ctxkit.context.allocator import Segment

        return [Segment(name=f.id, kind="memory", text=f.text, priority=priority, policy=policy,  # type: ignore[arg-type]
                        min_tokens=min_tokens, source_ref=f.source or None) for f in self.current()]

    def record(self, manifest: Manifest, *, estimate: Estimator = estimate_tokens) -> Manifest:
        """Write the supersedes links into ``manifest`` (in place; returned for chaining): the
        item of each current fact that replaced another gets ``supersedes``; each replaced or
        conflicting fact is listed as a ``drop`` item with the reason."""
        items = {i.id: i for i in manifest.items}
        by_id = {f.id: f for f in self.facts}
        for fact in self.facts:
            if fact.supersedes is not None and fact.id in items:
                items[fact.id].supersedes = fact.supersedes
        gone = self.superseded_by()
        extra: list[Item] = []
        for fact in self.facts:
            if fact.id in items:
                continue
            if fact.id in gone:
                new = by_id[gone[fact.id]]
                reason = (f"superseded by {new.id}: {fact.key} {fact.value!r} -> {new.value!r}"
                          + (f" ({new.source})" if new.source else ""))
            elif fact.conflicts_with is not None:
                winner = by_id[fact.conflicts_with]
                reason = (f"conflicts with {winner.id} ({winner.key} = {winner.value!r}), whose source "
                          f"({winner.authority}) outranks this one ({fact.authority}); not applied")
            else:
                continue
            extra.append(Item(id=fact.id, kind="memory", action="drop", requested_tokens=estimate(fact.text),
                              granted_tokens=0, used_tokens=0, reason=reason[:MAX_REASON],
                              source_ref=fact.source or None, supersedes=fact.supersedes))
        manifest.items = [*manifest.items, *extra]
        return manifest


def facts_text(facts: Iterable[Fact]) -> str:
    return "\n".join(f.text for f in facts)
