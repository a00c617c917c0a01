"""Watched facts in the analysis (docs/analysis.md, "Watched facts").

A project's watched facts (``WatchedFact``) become required evidence of its calls at analysis
time, so the existing attribution, triage page, overview, rollups and API show them with no
second path. For every call recorded with text (an item with ``text``), walking its run in
step order, each fact that applies to the call's agent is:

- **present** when its text (a substring) or its regular expression is found in the text of
  an item in context (``ctxkit.figures.in_context``): an entry ``fact:<label>``, present,
  found in that item;
- **missing** when it is not, and an earlier call of the run had it: an entry, not present,
  expected in the item that last held it, so the trace (``ctxkit.figures.trace_missing``)
  finds its cause as for any required evidence (the item dropped or cut, a context edit, a
  compaction, no longer a candidate);
- nothing when no earlier call of the run had it (not required there).

A compaction of a call whose previous call had a fact in context and which lacks it fails a
``required_evidence`` invariant listing the fact's label; that invariant names the label, so
the trace attributes the loss to the compaction.

The entries and invariants are written as rows flagged ``watched`` (evidence with the
``fact:`` key, invariants of the call's compactions) and the call's evidence counts and its
compactions' failure counts include them; every analysis of a call replaces them, so a fact
added or deleted applies to the calls analysed from then on, and re-analysing is idempotent.
The calls of the chunk's manifests are extended in memory with the same entries, which is all
the rest of the analysis reads.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from ctxkit import figures as fig
from ctxkit.manifest import Evidence as ManifestEvidence
from ctxkit.manifest import Invariant as ManifestInvariant
from ctxkit.manifest import InvariantName, Manifest
from manifests.analysis.data import CallData, clean
from manifests.models import Call, Compaction, Evidence, Invariant, Run, WatchedFact
from manifests.storage import partitions

REQUIRED_EVIDENCE: InvariantName = "required_evidence"


@dataclass(frozen=True)
class Watch:
    """One watched fact, compiled for matching."""

    key: str
    label: str
    text: str
    agent: str
    pattern: re.Pattern[str] | None

    def applies(self, agent: str) -> bool:
        return not self.agent or self.agent == agent

    def found_in(self, manifest: Manifest) -> str | None:
        """The first item in context whose text holds the fact; None when none does."""
        for item in manifest.items:
            if item.text and fig.in_context(item):
                if self.pattern.search(item.text) if self.pattern is not None else self.text in item.text:
                    return item.id
        return None


def watches_of(project_ids: Iterable[int]) -> dict[int, list[Watch]]:
    """The projects' watched facts, by project. A pattern that no longer compiles (validated
    when written, so only under another Python's ``re``) is left out rather than failing
    every call of its project."""
    out: dict[int, list[Watch]] = defaultdict(list)
    for fact in WatchedFact.objects.filter(project_id__in=set(project_ids)).order_by("pk"):
        pattern = None
        if fact.is_regex:
            try:
                pattern = re.compile(fact.text)
            except re.error:
                continue
        out[fact.project_id].append(Watch(fact.evidence_key, fact.label, fact.text, fact.agent, pattern))
    return out


def has_text(manifest: Manifest) -> bool:
    return any(item.text for item in manifest.items)


@dataclass
class _RunState:
    """What the walk knows at a step of a run: the item that last held each fact seen so
    far, and the facts in context at the previous call."""

    last_item: dict[str, str | None] = field(default_factory=dict)
    previous: set[str] = field(default_factory=set)


@dataclass
class Derived:
    """A call's watched entries and the invariant its last compaction failed, if any."""

    entries: list[ManifestEvidence]
    lost: list[str]


def _derive(manifest: Manifest, agent: str, watches: list[Watch], state: _RunState) -> Derived:
    entries: list[ManifestEvidence] = []
    lost: list[str] = []
    present: set[str] = set()
    for w in watches:
        if not w.applies(agent):
            continue
        where = w.found_in(manifest)
        # An expression is no literal: what reads literals back (the what-if replay) must not look for it.
        literal = w.text if w.pattern is None else None
        if where is not None:
            entries.append(ManifestEvidence(key=w.key, label=w.label, literal=literal, expected_item=where,
                                            present=True, found_in=where))
            present.add(w.key)
            state.last_item[w.key] = where
        elif w.key in state.last_item:
            entries.append(ManifestEvidence(key=w.key, label=w.label, literal=literal,
                                            expected_item=state.last_item[w.key], present=False))
            if manifest.compactions and w.key in state.previous:
                lost.append(w.label)
    state.previous = present
    return Derived(entries, lost)


def _invariant(lost: list[str]) -> ManifestInvariant:
    names = ", ".join(repr(x) for x in lost)
    return ManifestInvariant(name=REQUIRED_EVIDENCE, ok=False, lost=list(lost),
                             detail=f"watched fact {names} was in the previous call's context and is not after it")


def extended(manifest: Manifest, entries: list[ManifestEvidence],
             invariants: dict[str, list[ManifestInvariant]]) -> Manifest:
    """The manifest with the watched entries after its own evidence and the watched
    invariants after its compactions' own (by compaction id)."""
    if not entries and not invariants:
        return manifest
    compactions = [msgspec.structs.replace(c, invariants=[*c.invariants, *invariants[c.id]])
                   if c.id in invariants else c for c in manifest.compactions]
    return msgspec.structs.replace(manifest, evidence=[*manifest.evidence, *entries], compactions=compactions)


def _stored_presence(runs: set[int], until: dict[int, int]) -> dict[int, list[tuple[int, set[str], dict[str, str]]]]:
    """Per run, in step order, its calls up to the chunk's last step of that run: (pk, facts
    present, {key: item holding it}) from their stored watched rows."""
    if not runs:
        return {}
    span = Run.objects.filter(pk__in=runs).values_list("first_seen", "last_seen")
    lo = min(s[0] for s in span)
    hi = max(s[1] for s in span)
    calls = list(Call.objects.filter(run_id__in=runs, started_at__gte=lo, started_at__lte=hi)
                 .order_by("run_id", "step", "started_at", "pk").values_list("pk", "run_id", "step", "started_at"))
    calls = [c for c in calls if c[2] <= until[c[1]]]
    rows: dict[int, dict[str, str]] = defaultdict(dict)
    times = [c[3] for c in calls]
    for call_pk, key, found_in in (Evidence.objects.filter(call_id__in=[c[0] for c in calls], watched=True,
                                                           present=True, **partitions.span(times))
                                   .values_list("call_id", "key", "found_in")):
        rows[call_pk][key] = found_in or ""
    out: dict[int, list[tuple[int, set[str], dict[str, str]]]] = defaultdict(list)
    for pk, run_id, _, _ in calls:
        out[run_id].append((pk, set(rows.get(pk, {})), rows.get(pk, {})))
    return out


def derive(data: list[CallData], watches: dict[int, list[Watch]]) -> dict[int, Derived]:
    """The watched entries of each call of ``data`` (by primary key), walking each run in step
    order through the stored rows of its other calls."""
    mine = {d.call.pk: d for d in data if watches.get(d.call.project_id) and has_text(d.manifest)}
    if not mine:
        return {}
    until: dict[int, int] = {}
    for d in mine.values():
        until[d.call.run_id] = max(d.call.step, until.get(d.call.run_id, d.call.step))
    out: dict[int, Derived] = {}
    for calls in _stored_presence(set(until), until).values():
        state = _RunState()
        for pk, present, where in calls:
            own = mine.get(pk)
            if own is None:
                state.last_item.update(where)
                state.previous = present
                continue
            out[pk] = _derive(own.manifest, own.call.agent, watches[own.call.project_id], state)
    return out


def apply(data: list[CallData], watches: dict[int, list[Watch]]) -> None:
    """Replace the watched rows of the calls of ``data`` with those their facts (``watches``,
    by project) give now, extend their manifests in memory, and bring their evidence counts
    and their compactions' failure counts up to date."""
    if not data:
        return
    derived = derive(data, watches)
    times = partitions.span(d.call.started_at for d in data)
    pks = [d.call.pk for d in data]
    analysed = [pk for pk, d in zip(pks, data, strict=True) if d.call.analyzed_at is not None]
    comp_pks = [pk for d in data for pk in d.compaction_pks if pk is not None]
    if analysed:  # only an analysed call can hold watched rows
        Evidence.objects.filter(call_id__in=analysed, watched=True, **times).delete()
        if comp_pks:
            Invariant.objects.filter(compaction_id__in=comp_pks, watched=True, **times).delete()

    new_evidence: list[Evidence] = []
    new_invariants: list[Invariant] = []
    failures: dict[int, int] = {}
    for d in data:
        found = derived.get(d.call.pk)
        invariants: dict[str, list[ManifestInvariant]] = {}
        if found is not None and found.lost and d.manifest.compactions:
            last = len(d.manifest.compactions) - 1
            comp_pk = d.compaction_pks[last] if last < len(d.compaction_pks) else None
            invariant = _invariant(found.lost)
            invariants[d.manifest.compactions[last].id] = [invariant]
            if comp_pk is not None:
                new_invariants.append(Invariant(compaction_id=comp_pk, started_at=d.call.started_at,
                                                name=invariant.name, ok=False, detail=clean(invariant.detail),
                                                lost=[clean(x) for x in invariant.lost], watched=True))
        entries = found.entries if found is not None else []
        for e in entries:
            new_evidence.append(Evidence(call_id=d.call.pk, project_id=d.call.project_id, started_at=d.call.started_at,
                                         key=clean(e.key), label=clean(e.label), literal=_optional(e.literal),
                                         expected_item=_optional(e.expected_item), present=e.present,
                                         found_in=_optional(e.found_in), used=None, watched=True))
        d.manifest = extended(d.manifest, entries, invariants)
        for index, comp in enumerate(d.manifest.compactions):
            pk = d.compaction_pks[index] if index < len(d.compaction_pks) else None
            if pk is not None:
                failures[pk] = sum(1 for inv in comp.invariants if not inv.ok)
    Evidence.objects.bulk_create(new_evidence, batch_size=500)
    Invariant.objects.bulk_create(new_invariants, batch_size=500)
    created = iter(e.pk for e in new_evidence)
    for d in data:
        extra = len(d.manifest.evidence) - len(d.evidence_pks)
        d.evidence_pks = [*d.evidence_pks, *(next(created) for _ in range(extra))]
    if not watches and not analysed:
        failures = {}  # fresh calls, no fact: the counts are the manifests' own, as ingest wrote them
    _update_counts(data, failures, times)


def _optional(value: str | None) -> str | None:
    return None if value is None else clean(value)


def _update_counts(data: list[CallData], failures: dict[int, int], times: dict[str, datetime]) -> None:
    """The calls' evidence counts and their compactions' failure counts, from the extended
    manifests; written only where they changed."""
    for d in data:
        count = len(d.manifest.evidence)
        missing = sum(1 for e in d.manifest.evidence if not e.present)
        if (d.call.evidence_count, d.call.evidence_missing) != (count, missing):
            d.call.evidence_count, d.call.evidence_missing = count, missing
            Call.objects.filter(pk=d.call.pk, started_at=d.call.started_at).update(evidence_count=count,
                                                                                   evidence_missing=missing)
    if not failures:
        return
    stored = dict(Compaction.objects.filter(pk__in=list(failures), **times).values_list("pk", "failed_invariants"))
    for pk, failed in failures.items():
        if stored.get(pk, failed) != failed:
            Compaction.objects.filter(pk=pk, **times).update(failed_invariants=failed)


def stored_extension(pk: int, at: datetime | None, manifest: Manifest) -> Manifest:
    """An analysed call's manifest with the watched entries and invariants stored for it
    (for a trace that reads the cause of a call outside the chunk)."""
    when = {"started_at": at} if at is not None else {}
    entries = [ManifestEvidence(key=k, label=label, literal=literal, expected_item=expected, present=present,
                                found_in=found_in)
               for k, label, literal, expected, present, found_in in
               Evidence.objects.filter(call_id=pk, watched=True, **when).order_by("pk")
               .values_list("key", "label", "literal", "expected_item", "present", "found_in")]
    invariants: dict[str, list[ManifestInvariant]] = defaultdict(list)
    for event_id, ok, detail, lost in (Invariant.objects.filter(compaction__call_id=pk, watched=True,
                                                                name=REQUIRED_EVIDENCE, **when)
                                       .order_by("pk").values_list("compaction__event_id", "ok", "detail", "lost")):
        invariants[event_id].append(ManifestInvariant(name=REQUIRED_EVIDENCE, ok=ok, detail=detail, lost=list(lost)))
    return extended(manifest, entries, dict(invariants))


def runs_with_watches(calls: list[Call], watches: dict[int, list[Watch]]) -> set[int]:
    """The runs of ``calls`` whose project watches facts: their later, analysed calls are
    derived again when an earlier step arrives late (it may make a fact required there)."""
    return {c.run_id for c in calls if watches.get(c.project_id)}
