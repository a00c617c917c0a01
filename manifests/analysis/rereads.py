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
from dataclasses import dataclass

from ctxkit import figures
from ctxkit.manifest import Item, Manifest, decode_manifest
from manifests.models import Call, Run
from manifests.models import ReRead as ReReadRow

__all__ = ["Derived", "Loss", "ReRead", "derive", "find"]

CAUSE_COMPACTION = "compaction"
CAUSE_CONTEXT_EDIT = "context_edit"
CAUSE_TRUNCATE = "truncate"
CAUSE_DROP = "drop"


@dataclass(frozen=True)
class Loss:
    """Where a held result was lost: the earlier result's call and the call that lost it."""

    group: str  # the earlier tool call's id
    result_item: str  # the earlier result item's id
    result_call: int  # index (in the given sequence) of the last call that held the result
    lost_call: int  # index of the first call that no longer held it
    cause: str  # compaction, context_edit, truncate or drop
    cause_ref: str  # the compaction event id or context edit type; "" for the item's own action


@dataclass(frozen=True)
class ReRead:
    call: int  # index of the call whose context first holds the re-read result
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


def find(manifests: Sequence[Manifest]) -> list[ReRead]:
    """The re-reads of a run whose calls' manifests are given in step order."""
    keys: dict[str, str] = {}  # group -> key, over the run so far
    seen: set[str] = set()  # groups whose result appeared in an earlier call
    held: dict[str, tuple[str, str, int]] = {}  # group -> (key, result item id, last call holding it)
    lost: dict[str, Loss] = {}  # key -> the latest loss of a result with that key
    out: list[ReRead] = []
    for index, manifest in enumerate(manifests):
        keys.update(_keys(manifest))
        results: dict[str, Item] = {i.group: i for i in manifest.items if i.kind == "tool_result" and i.group}
        for group, (key, item_id, last) in list(held.items()):
            item = results.get(group)
            if item is not None and _held(item):
                held[group] = (key, item_id, index)
                continue
            cause, ref = _cause(manifest, item)
            lost[key] = Loss(group=group, result_item=item_id, result_call=last, lost_call=index,
                             cause=cause, cause_ref=ref)
            del held[group]
        for group, item in results.items():
            if group in seen:
                continue
            seen.add(group)
            call_key = keys.get(group)
            if call_key is None:
                continue
            if call_key in lost and figures.in_context(item):
                out.append(ReRead(call=index, group=group, result_item=item.id, tool=item.label or "",
                                  tokens=figures.reread_tokens(item), loss=lost.pop(call_key)))
            if _held(item):
                held[group] = (call_key, item.id, index)
                lost.pop(call_key, None)
    return out


@dataclass(frozen=True)
class Derived:
    """The re-read rows :func:`derive` found, and the calls (pks) whose re-reads they are: the
    rows of these calls replace what was stored for them."""

    rows: list[ReReadRow]
    calls: set[int]


def derive(calls: Sequence[Call]) -> Derived:
    """The re-read rows of ``calls`` and of the analysed calls at later steps of their runs (a
    call that arrives late changes what the steps after it re-read): each touched run's calls up
    to the last of those steps are read in step order (their raw manifests, within the run's time
    span) and walked by :func:`find`."""
    chunk = {c.pk for c in calls}
    out: list[ReReadRow] = []
    done: set[int] = set()
    spans = {r.pk: (r.first_seen, r.last_seen) for r in Run.objects.filter(pk__in={c.run_id for c in calls})}
    for run_pk in sorted(spans):
        first_seen, last_seen = spans[run_pk]
        of_run = Call.objects.filter(run_id=run_pk, started_at__gte=first_seen, started_at__lte=last_seen)
        first = min(c.step for c in calls if c.run_id == run_pk)
        steps = {pk: step for pk, step, analysed in of_run.values_list("pk", "step", "analyzed_at")
                 if pk in chunk or (step > first and analysed is not None)}
        if not steps:
            continue
        wanted, upto = set(steps), max(steps.values())
        rows = list(of_run.filter(step__lte=upto).order_by("step", "started_at", "pk")
                    .only("pk", "step", "started_at", "raw", "project_id"))
        done |= wanted
        for found in find([decode_manifest(r.raw.encode()) for r in rows]):
            call = rows[found.call]
            if call.pk not in wanted:
                continue
            out.append(ReReadRow(
                project_id=call.project_id, call_id=call.pk, started_at=call.started_at, run_id=run_pk,
                step=call.step, group=found.group[:200], result_item=found.result_item[:200],
                tool=found.tool[:200], tokens=found.tokens, earlier_call_id=rows[found.loss.result_call].pk,
                earlier_item=found.loss.result_item[:200], lost_call_id=rows[found.loss.lost_call].pk,
                cause=found.loss.cause, cause_ref=found.loss.cause_ref[:200],
            ))
    return Derived(out, done)
