"""Re-reads after loss (docs/analysis.md, "Re-reads"): a tool call whose tool name and
arguments repeat one whose result the context lost in between.

The key of a tool call is its tool call item's ``content_hash``: the providers' mappings
write the call item's text as canonical JSON of the tool name and its arguments
(``ctxkit.providers``), so equal keys are equal calls whatever the source (proxy, import,
SDK). A tool call and its result share a ``group`` (the tool call id).

Walking a run's calls in step order, a result is *held* while it reaches the model in full
(``ctxkit.figures.in_context`` and not truncated). It is *lost* at the first later call
where it no longer does: absent from the manifest, dropped, cleared or truncated. The loss
is named by that call's compaction, else its context edit, else the result item's action.
A result of a new tool call (a group not seen before in the run) whose key matches a lost
result is a re-read; its tokens are the re-read result's tokens in context
(``ctxkit.figures.reread_tokens``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.cache import cache
from django.db.models import BooleanField, Count, ExpressionWrapper, Max, Q, QuerySet

from ctxkit import figures
from ctxkit.manifest import Item, Manifest, decode_manifest
from manifests.models import Call, Run
from manifests.models import ReRead as ReReadRow

__all__ = ["Derived", "Loss", "ReRead", "Walk", "derive", "find"]

CAUSE_COMPACTION = "compaction"
CAUSE_CONTEXT_EDIT = "context_edit"
CAUSE_TRUNCATE = "truncate"
CAUSE_DROP = "drop"


@dataclass(frozen=True)
class Loss:
    """Where a held result was lost: the earlier result's call and the call that lost it."""

    group: str  # the earlier tool call's id
    result_item: str  # the earlier result item's id
    result_call: int  # the ref (index in the given sequence, or pk) of the last call that held the result
    lost_call: int  # the ref of the first call that no longer held it
    cause: str  # compaction, context_edit, truncate or drop
    cause_ref: str  # the compaction event id or context edit type; "" for the item's own action


@dataclass(frozen=True)
class ReRead:
    call: int  # the ref of the call whose context first holds the re-read result
    group: str
    result_item: str
    tool: str  # the tool's name when the result item carries a label
    tokens: int
    loss: Loss


def _keys(manifest: Manifest) -> dict[str, str]:
    """Tool call id -> key (the call item's content hash) of the manifest's tool calls."""
    out: dict[str, str] = {}
    for item in manifest.items:
        if item.group and item.kind != "tool_result" and item.content_hash:
            out.setdefault(item.group, item.content_hash)
    return out


def _held(item: Item) -> bool:
    return figures.in_context(item) and item.action != "truncate"


def _cause(manifest: Manifest, item: Item | None) -> tuple[str, str]:
    action = item.action if item is not None else ""
    if manifest.compactions:
        return CAUSE_COMPACTION, manifest.compactions[0].id
    if manifest.context_edits and action in ("", "clear"):
        return CAUSE_CONTEXT_EDIT, manifest.context_edits[0].type
    if action == "truncate":
        return CAUSE_TRUNCATE, ""
    return CAUSE_DROP, ""


@dataclass
class Walk:
    """The walk through a run's calls in step order, resumable: what it knows after the calls
    it has taken (each call named by a number, ``ref``: an index, or the call's pk)."""

    keys: dict[str, str] = field(default_factory=dict)  # group -> key, over the run so far
    seen: set[str] = field(default_factory=set)  # groups whose result appeared in an earlier call
    held: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # group -> (key, item, last ref)
    lost: dict[str, Loss] = field(default_factory=dict)  # key -> the latest loss of a result with that key

    def take(self, ref: int, manifest: Manifest) -> list[ReRead]:
        """The re-reads of the next call of the run."""
        self.keys.update(_keys(manifest))
        results: dict[str, Item] = {i.group: i for i in manifest.items if i.kind == "tool_result" and i.group}
        for group, (key, item_id, last) in list(self.held.items()):
            item = results.get(group)
            if item is not None and _held(item):
                self.held[group] = (key, item_id, ref)
                continue
            cause, cause_ref = _cause(manifest, item)
            self.lost[key] = Loss(group=group, result_item=item_id, result_call=last, lost_call=ref,
                                  cause=cause, cause_ref=cause_ref)
            del self.held[group]
        out: list[ReRead] = []
        for group, item in results.items():
            if group in self.seen:
                continue
            self.seen.add(group)
            call_key = self.keys.get(group)
            if call_key is None:
                continue
            if call_key in self.lost and figures.in_context(item):
                out.append(ReRead(call=ref, group=group, result_item=item.id, tool=item.label or "",
                                  tokens=figures.reread_tokens(item), loss=self.lost.pop(call_key)))
            if _held(item):
                self.held[group] = (call_key, item.id, ref)
                self.lost.pop(call_key, None)
        return out


def find(manifests: Sequence[Manifest]) -> list[ReRead]:
    """The re-reads of a run whose calls' manifests are given in step order (refs: their indices)."""
    walk = Walk()
    return [found for index, manifest in enumerate(manifests) for found in walk.take(index, manifest)]


# A run's walk is kept in the cache after each chunk, so that the next chunk of the run goes on
# from there rather than from the run's first call: with it, a run analysed a call at a time is
# walked once, not once per call. Kept a day; a miss walks the run from its start.
WALK_TTL_SECONDS = 24 * 3600


@dataclass
class _Saved:
    """A run's walk after its first ``count`` calls in step order, the last of them ``last``
    (step, started_at, pk); ``top`` and ``received`` are those calls' greatest pk and time of
    arrival. Valid while the calls up to ``last`` still have the same count, top and arrival:
    a call stored since among them (a late call, or a run stored again under the same pk)
    changes one of them."""

    count: int
    last: tuple[int, datetime, int]
    top: int
    received: datetime
    walk: Walk


def _after(last: tuple[int, datetime, int]) -> Q:
    """The calls after ``last`` in step order (step, started_at, pk)."""
    step, at, pk = last
    return Q(step__gt=step) | Q(step=step, started_at__gt=at) | Q(step=step, started_at=at, pk__gt=pk)


def _resumable(of_run: QuerySet[Call], saved: Any, calls: Sequence[Call]) -> bool:
    """Does ``saved`` still hold for the run's calls ``of_run``, with ``calls`` (the chunk's, of
    this run) all after it?"""
    if not isinstance(saved, _Saved) or any((c.step, c.started_at, c.pk) <= saved.last for c in calls):
        return False
    now = of_run.exclude(_after(saved.last)).aggregate(n=Count("pk"), top=Max("pk"), received=Max("received_at"))
    return (now["n"], now["top"], now["received"]) == (saved.count, saved.top, saved.received)


def _walk_key(run_pk: int) -> str:
    return f"ctxview:rereads:walk:{run_pk}"


@dataclass(frozen=True)
class Derived:
    """The re-read rows :func:`derive` found, and the calls (pks) whose re-reads they are: the
    rows of these calls replace what was stored for them."""

    rows: list[ReReadRow]
    calls: set[int]


def derive(calls: Sequence[Call]) -> Derived:
    """The re-read rows of ``calls`` and of the analysed calls at later steps of their runs (a
    call that arrives late changes what the steps after it re-read). Each touched run is walked
    in step order up to the last of those steps (within the run's time span), from where the
    previous chunk of the run left its walk when that still holds (the same calls before it,
    none of them analysed again now), else from the run's first call; only the raw manifests of
    the calls walked are read and decoded."""
    chunk = {c.pk for c in calls}
    out: list[ReReadRow] = []
    done: set[int] = set()
    runs = {r.pk: r for r in Run.objects.filter(pk__in={c.run_id for c in calls})}
    for run_pk in sorted(runs):
        run = runs[run_pk]
        of_run = Call.objects.filter(run_id=run_pk, started_at__gte=run.first_seen, started_at__lte=run.last_seen)
        mine = [c for c in calls if c.run_id == run_pk]
        saved = cache.get(_walk_key(run_pk))
        resume = _resumable(of_run, saved, mine)
        walk = saved.walk if resume else Walk()
        tail = of_run.filter(_after(saved.last)) if resume else of_run
        # No times here (the run's every call may be listed: converting their times would cost the most).
        order = list(tail.order_by("step", "started_at", "pk").annotate(
            analysed=ExpressionWrapper(Q(analyzed_at__isnull=False), output_field=BooleanField()))
            .values_list("pk", "step", "analysed"))
        first = min(c.step for c in mine)
        wanted = {pk for pk, step, analysed in order if pk in chunk or (step > first and analysed)}
        if not wanted:
            continue
        end = max(n for n, row in enumerate(order) if row[0] in wanted) + 1
        read = {pk: (raw, at, received) for pk, raw, at, received in of_run.filter(
            pk__in=[row[0] for row in order[:end]]).values_list("pk", "raw", "started_at", "received_at")}
        done |= wanted
        for pk, step, _ in order[:end]:
            raw, at, _ = read[pk]
            for found in walk.take(pk, decode_manifest(raw.encode())):
                if pk not in wanted:
                    continue
                out.append(ReReadRow(
                    project_id=run.project_id, call_id=pk, started_at=at, run_id=run_pk, step=step,
                    group=found.group[:200], result_item=found.result_item[:200], tool=found.tool[:200],
                    tokens=found.tokens, earlier_call_id=found.loss.result_call,
                    earlier_item=found.loss.result_item[:200], lost_call_id=found.loss.lost_call,
                    cause=found.loss.cause, cause_ref=found.loss.cause_ref[:200],
                ))
        last_pk, last_step, _ = order[end - 1]
        pks = [row[0] for row in order[:end]]
        received = [read[pk][2] for pk in pks]
        if resume:
            pks.append(saved.top)
            received.append(saved.received)
        cache.set(_walk_key(run_pk), _Saved(count=(saved.count if resume else 0) + end,
                                            last=(last_step, read[last_pk][1], last_pk), top=max(pks),
                                            received=max(received), walk=walk), WALK_TTL_SECONDS)
    return Derived(out, done)
