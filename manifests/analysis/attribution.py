"""Drop attribution: why a required piece of evidence did not help (docs/analysis.md).

Missing evidence (it did not reach the model) gets exactly one cause, decided by the
run's history (ctxkit.figures.trace_missing): the first step of the run where it was
lost is the cause for every later step that lacks it, and the row points at that step
(``lost_at``). Evidence that did reach the model can carry risks (not used by the
answer, in the middle zone, truncated but present), stored with ``is_risk``. Every row
names the item and copies the decision (action + reason) recorded where the evidence was
lost, at that call or an earlier one, so the user can check it against the manifest. The
rules themselves live in ctxkit.figures.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

from django.db.models import Max, Min

from ctxkit import figures as fig
from ctxkit.manifest import Evidence as ManifestEvidence
from ctxkit.manifest import Manifest, decode_manifest
from manifests.analysis.data import CallData, clean
from manifests.models import Attribution, Call, Evidence, Run
from manifests.storage import partitions

FIXES = {
    Attribution.NEVER_CANDIDATE: (
        "Retrieval: the evidence never reached the candidates. Index the source, widen or fix the query, "
        "or inject it as structured state (P0/P1 items are not chosen by similarity)."
    ),
    Attribution.LEFT_CANDIDATES: (
        "Agent / retrieval: the evidence was in an earlier call of the run and then stopped being offered, "
        "without a recorded decision. Keep required evidence among the candidates (structured state), or record "
        "the drop so the manifest says why."
    ),
    Attribution.BUDGET: (
        "Budget policy: the allocator dropped or cut the item. Raise its priority or pin it, reserve "
        "budget for required evidence, or shrink lower-priority items first."
    ),
    Attribution.TRUNCATED: (
        "Truncation policy: the cut removed the span that held the evidence. Keep that span "
        "(head/tail ratio, extraction of key lines) or replace the text by a reference that can be read back."
    ),
    Attribution.COMPACTION: (
        "Compactor: the summary or compression lost it. Keep required evidence and constraints verbatim, "
        "check invariants after compacting, and fall back to extraction or a larger budget when a check fails."
    ),
    Attribution.NOT_USED: (
        "Model / prompt: the evidence was in the context but the answer did not rest on it. Ask for claims "
        "with evidence ids, restate it in the final checklist, place it at the head or tail, or try another model."
    ),
    Attribution.TRUNCATED_PRESENT: (
        "Truncation (risk): the item was cut and the evidence survived this time. Keep the span that holds it "
        "(extraction of key lines), or pin the evidence as its own item."
    ),
    Attribution.MIDDLE_ZONE: (
        "Layout (risk): the evidence sat in the middle of the context, where models use it least (Lost in the "
        "Middle). Put key constraints at the head and current evidence at the tail."
    ),
}



LostAt = tuple[int, str]  # (primary key, label) of the earlier call where the evidence was lost
Extend = Callable[[int, datetime | None, Manifest], Manifest]


def _row(data: CallData, index: int, ev: ManifestEvidence, cause: fig.Cause, lost_at: LostAt | None) -> Attribution:
    """One attribution: the item and the decision recorded on it where the evidence was lost
    (``lost_at``: the primary key and label of that earlier call of the run, else this call)."""
    call = data.call
    return Attribution(
        project_id=call.project_id,
        call=call,
        evidence_id=data.evidence_pks[index] if index < len(data.evidence_pks) else None,
        evidence_key=clean(ev.key),
        cause=cause.cause,
        fix=FIXES[cause.cause],
        item_id=clean(cause.item_id or ""),
        action=cause.action,
        reason=clean(fig.stated_reason(cause, lost_at[1] if lost_at is not None else None)),
        is_risk=cause.is_risk,
        lost_at_id=lost_at[0] if lost_at is not None else None,
        started_at=call.started_at,
        run_id=call.run_id,
        agent=call.agent,
        model=call.model,
    )


class RunHistory:
    """The calls of the runs a chunk touches, in step order, with which evidence keys each
    declared and whether present: enough to trace a missing key back to its loss. The
    manifest of an earlier call is decoded only when the trace needs its own cause."""

    def __init__(self, data: list[CallData], extend: Extend | None = None) -> None:
        # ``extend``: what a manifest decoded here gains beyond its raw JSON (the watched
        # facts' entries stored for that call, manifests/analysis/facts.py).
        self.extend = extend
        runs = {d.call.run_id for d in data if any(not e.present for e in d.manifest.evidence)}
        self.manifests: dict[int, Manifest] = {d.call.pk: d.manifest for d in data}
        self.order: dict[int, list[tuple[int, int]]] = defaultdict(list)  # run -> [(pk, step)]
        self.started: dict[int, datetime] = {}
        # The runs' calls lie between their first and last seen times: bounded by those, the
        # reads below touch only the runs' days' partitions (PostgreSQL), not every day's.
        span = Run.objects.filter(pk__in=runs).aggregate(lo=Min("first_seen"), hi=Max("last_seen")) if runs else {}
        days = {"started_at__gte": span["lo"], "started_at__lte": span["hi"]} if span.get("lo") else {}
        for pk, run_id, step, at in (Call.objects.filter(run_id__in=runs, **days)
                                     .order_by("run_id", "step", "started_at", "pk")
                                     .values_list("pk", "run_id", "step", "started_at")):
            self.order[run_id].append((pk, step))
            self.started[pk] = at
        self.present: dict[tuple[int, str], bool] = {}
        for call_pk, key, present in (Evidence.objects.filter(call_id__in=list(self.started),
                                                              **partitions.span(self.started.values()))
                                      .order_by("pk").values_list("call_id", "key", "present")):
            self.present[(call_pk, key)] = self.present.get((call_pk, key), False) or present

    def _manifest(self, pk: int) -> Manifest:
        if pk not in self.manifests:
            at = {"started_at": self.started[pk]} if pk in self.started else {}  # its day's partition
            manifest = decode_manifest(Call.objects.values_list("raw", flat=True).get(pk=pk, **at).encode())
            self.manifests[pk] = self.extend(pk, self.started.get(pk), manifest) if self.extend else manifest
        return self.manifests[pk]

    def _local(self, pk: int, key: str) -> Callable[[], fig.Cause]:
        def local() -> fig.Cause:
            m = self._manifest(pk)
            return fig.local_missing_cause(m, fig.first_missing(m, key))
        return local

    def cause(self, call: Call, ev: ManifestEvidence) -> tuple[fig.Cause, LostAt | None]:
        """(cause, (primary key, label) of the call where it was lost when that is an
        earlier one); the cause keeps the decision recorded at that call."""
        calls = self.order.get(call.run_id) or [(call.pk, call.step)]
        history = [fig.Step(present=self.present.get((pk, ev.key)), local=self._local(pk, ev.key),
                            label=f"step {step}") for pk, step in calls]
        at = next((n for n, (pk, _) in enumerate(calls) if pk == call.pk), len(calls) - 1)
        cause = fig.trace_missing(history, at)
        if cause.lost_at is None:
            return cause, None
        return cause, (calls[cause.lost_at][0], history[cause.lost_at].label)


def attribute(data: CallData, positions: dict[str, float], history: RunHistory,
              cost: tuple[float, float | None]) -> list[Attribution]:
    """The call's attributions; ``cost`` (its CallFigures.cost and cost_usd) goes on its first
    attribution of each cause, so that what the calls of a cause paid sums each call once."""
    m = data.manifest
    cited = fig.cited_keys(m)
    out: list[Attribution] = []
    for index, ev in enumerate(m.evidence):
        if not ev.present:
            cause, lost_at = history.cause(data.call, ev)
            out.append(_row(data, index, ev, cause, lost_at))
            continue
        for risk in fig.evidence_risks(m, ev, positions, cited):
            out.append(_row(data, index, ev, risk, None))
    costed: set[str] = set()
    for row in out:
        if row.cause not in costed:
            costed.add(row.cause)
            row.call_cost, row.call_cost_usd = cost
    return out
