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

A task's hard constraint yields to the user only when the user changes it explicitly *and*
confirms the change: a ``user`` write over a ``task`` fact is held (``held_against`` the task
fact), the task constraint stays current, and :meth:`Memory.confirm` or :meth:`Memory.reject`
appends the decision. Every fact carries the write-back record's ``confidence``: ``explicit``
(stated by its source: system, user, task), ``verified`` (a checked tool or world fact) or
``recalled`` (long-term memory, possibly out of date), by default from its authority.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from ctxkit.context.tokens import Estimator, estimate_tokens
from ctxkit.manifest import MAX_REASON, Item, Manifest, Policy

if TYPE_CHECKING:
    from ctxkit.context.allocator import Segment

Authority = Literal["system", "user", "task", "tool", "preference", "inference"]
AUTHORITY: tuple[str, ...] = ("system", "user", "task", "tool", "preference", "inference")  # highest first
Confidence = Literal["explicit", "verified", "recalled"]
CONFIDENCE: tuple[str, ...] = ("explicit", "verified", "recalled")
# How sure a fact is, by who wrote it, unless the writer says otherwise.
DEFAULT_CONFIDENCE: dict[str, Confidence] = {
    "system": "explicit", "user": "explicit", "task": "explicit", "tool": "verified", "preference": "recalled",
}
Resolution = Literal["confirmed", "rejected"]


@dataclass(frozen=True, slots=True)
class Fact:
    """One written-back fact (key, value, previous, source, observed_at, supersedes,
    confidence).

    ``held_against``: a user's change to a task constraint waiting for confirmation (the id of
    the task fact it would replace). ``resolves`` and ``resolution``: the decision on such a
    change, appended by :meth:`Memory.confirm` (it then supersedes the task fact) or
    :meth:`Memory.reject`.
    """

    id: str
    key: str
    value: str
    authority: Authority = "tool"
    source: str = ""
    observed_at: datetime | None = None
    supersedes: str | None = None
    previous: str | None = None
    conflicts_with: str | None = None  # set when a lower-authority write lost against the current fact
    confidence: Confidence | None = None  # None: DEFAULT_CONFIDENCE of the authority
    held_against: str | None = None
    resolves: str | None = None
    resolution: Resolution | None = None

    def __post_init__(self) -> None:
        if self.confidence is None:
            object.__setattr__(self, "confidence", DEFAULT_CONFIDENCE.get(self.authority, "explicit"))
        elif self.confidence not in CONFIDENCE:
            raise ValueError(f"confidence must be one of {CONFIDENCE}")

    @property
    def text(self) -> str:
        src = f" (source: {self.source})" if self.source else ""
        return f"{self.key}: {self.value}{src}"

    def record(self) -> dict[str, str | None]:
        """The write-back record as the material writes it (observed_at in RFC 3339), plus the id."""
        observed = self.observed_at.isoformat().replace("+00:00", "Z") if self.observed_at else None
        return {"id": self.id, "key": self.key, "value": self.value, "previous": self.previous,
                "source": self.source, "observed_at": observed, "supersedes": self.supersedes,
                "confidence": self.confidence}


@dataclass
class Memory:
    """An append-only fact ledger; :meth:`current` is what a context may show."""

    facts: list[Fact] = field(default_factory=list)

    def write(self, key: str, value: str, *, authority: Authority = "tool", source: str = "",
              observed_at: datetime | None = None, supersedes: str | None = None, fact_id: str | None = None,
              confidence: Confidence | None = None) -> Fact:
        """Append a fact. It supersedes ``supersedes`` (a fact id) or else the current fact of
        the same key, unless that one has higher authority (then it is kept as a conflict) or
        is a task constraint the user changes (then the change is held for confirmation:
        :meth:`held`, :meth:`confirm`, :meth:`reject`)."""
        if authority not in AUTHORITY:
            raise ValueError(f"authority must be one of {AUTHORITY}")
        if authority == "inference":
            raise ValueError("a model inference is not written back alone: verify it first")
        by_id = {f.id: f for f in self.facts}
        if supersedes is not None and supersedes not in by_id:
            raise ValueError(f"supersedes {supersedes!r}: no such fact")
        older = by_id[supersedes] if supersedes is not None else self.current_fact(key)
        fid = fact_id or self._new_id(key, value)
        if fid in by_id:
            raise ValueError(f"fact id {fid!r} already used")
        if older is not None and AUTHORITY.index(authority) > AUTHORITY.index(older.authority):
            fact = Fact(fid, key, value, authority, source, observed_at, conflicts_with=older.id, confidence=confidence)
        elif older is not None and authority == "user" and older.authority == "task":
            fact = Fact(fid, key, value, authority, source, observed_at, previous=older.value, confidence=confidence,
                        held_against=older.id)
        else:
            fact = Fact(fid, key, value, authority, source, observed_at, supersedes=older.id if older else None,
                        previous=older.value if older else None, confidence=confidence)
        self.facts.append(fact)
        return fact

    def _new_id(self, key: str, value: str) -> str:
        return "mem_" + hashlib.sha256(f"{len(self.facts)}\x1f{key}\x1f{value}".encode()).hexdigest()[:8]

    def held(self) -> list[Fact]:
        """Users' changes to task constraints still waiting for confirmation, in write order."""
        decided = {f.resolves for f in self.facts if f.resolves is not None}
        return [f for f in self.facts if f.held_against is not None and f.id not in decided]

    def _held(self, fact_id: str) -> Fact:
        for fact in self.held():
            if fact.id == fact_id:
                return fact
        raise ValueError(f"{fact_id!r} is not a change waiting for confirmation")

    def confirm(self, fact_id: str, *, source: str = "", observed_at: datetime | None = None) -> Fact:
        """The user confirmed the held change ``fact_id``: append a fact with its value that
        supersedes the task constraint (``source``: where the confirmation came from)."""
        held = self._held(fact_id)
        task = next(f for f in self.facts if f.id == held.held_against)
        if task not in self.current():
            raise ValueError(f"{fact_id!r}: the task constraint {task.id!r} it would replace is no longer current; "
                             "write the change again")
        fact = Fact(self._new_id(held.key, held.value), held.key, held.value, "user", source or held.source,
                    observed_at, supersedes=task.id, previous=task.value, confidence=held.confidence,
                    resolves=held.id, resolution="confirmed")
        self.facts.append(fact)
        return fact

    def reject(self, fact_id: str, *, source: str = "", observed_at: datetime | None = None) -> Fact:
        """The user did not confirm the held change ``fact_id``: append the decision; the task
        constraint stays current."""
        held = self._held(fact_id)
        fact = Fact(self._new_id(held.key, held.value), held.key, held.value, "user", source or held.source,
                    observed_at, previous=held.previous, confidence=held.confidence, resolves=held.id,
                    resolution="rejected")
        self.facts.append(fact)
        return fact

    def superseded_by(self) -> dict[str, str]:
        """Old fact id -> the id of the fact that replaced it."""
        return {f.supersedes: f.id for f in self.facts if f.supersedes is not None}

    def current(self) -> list[Fact]:
        """Facts neither replaced, lost in a conflict, held for confirmation nor rejected, in write order."""
        gone = self.superseded_by()
        return [f for f in self.facts if f.id not in gone and f.conflicts_with is None and f.held_against is None
                and f.resolution != "rejected"]

    def current_fact(self, key: str) -> Fact | None:
        found = [f for f in self.current() if f.key == key]
        return found[-1] if found else None

    def segments(self, *, priority: int = 50, policy: Policy = "extract", min_tokens: int = 0) -> list[Segment]:
        """One allocator ``Segment`` per current fact (name = fact id, kind ``memory``), then one
        pinned ``state`` segment per change held for confirmation (name = its fact id), which
        tells the model the task constraint still holds and the user has to confirm the change."""
        from ctxkit.context.allocator import Segment

        facts = [Segment(name=f.id, kind="memory", text=f.text, priority=priority, policy=policy,
                         min_tokens=min_tokens, source_ref=f.source or None) for f in self.current()]
        return facts + [Segment(name=f.id, kind="state", text=held_text(f), priority=priority, policy="pin",
                                source_ref=f.source or None, zone="tail") for f in self.held()]

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
        decisions = {f.resolves: f for f in self.facts if f.resolves is not None}
        extra: list[Item] = []
        for fact in self.facts:
            if fact.id in items:
                continue
            if fact.id in gone:
                new = by_id[gone[fact.id]]
                reason = (f"superseded by {new.id}: {fact.key} {fact.value!r} -> {new.value!r}"
                          + (f" ({new.source})" if new.source else ""))
            elif fact.held_against is not None:
                decision = decisions.get(fact.id)
                change = f"the user's change of task constraint {fact.key} {fact.previous!r} -> {fact.value!r}"
                if decision is None:
                    reason = f"held for confirmation: {change}; not applied until the user confirms it"
                else:
                    reason = f"{change} was {decision.resolution} in {decision.id}" + (
                        f" ({decision.source})" if decision.source else "")
            elif fact.resolution == "rejected":
                reason = (f"rejected: {fact.key} stays {fact.previous!r}, the task constraint"
                          + (f" ({fact.source})" if fact.source else ""))
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


def held_text(fact: Fact) -> str:
    """What the model reads of a change held for confirmation."""
    src = f" (source: {fact.source})" if fact.source else ""
    return (f"awaiting the user's confirmation: change task constraint {fact.key} from {fact.previous!r} to "
            f"{fact.value!r}{src}; until confirmed, {fact.key} stays {fact.previous!r}")


def facts_text(facts: Iterable[Fact]) -> str:
    return "\n".join(f.text for f in facts)
