"""Compaction review (docs/analysis.md): per compaction event, the
compression ratio r, the field distortion d and what was lost.

r = tokens_after / tokens_before (lower is smaller). d is the share of the required
field groups checked after the compaction (pending obligations, active operations,
user constraints, required evidence) that failed: 0 when everything survived, 1 when
nothing did. Reporting r without d says what was saved, not what was lost.
"""

from __future__ import annotations

from manifests.analysis.data import CallData, clean
from manifests.models import CompactionFigures


def review(data: CallData) -> list[CompactionFigures]:
    call = data.call
    out: list[CompactionFigures] = []
    for index, comp in enumerate(data.manifest.compactions):
        pk = data.compaction_pks[index] if index < len(data.compaction_pks) else None
        if pk is None:
            continue
        checked = len(comp.invariants)
        failed = [inv for inv in comp.invariants if not inv.ok]
        lost: list[str] = []
        for inv in failed:
            for item in inv.lost:
                text = clean(item)
                if text not in lost:
                    lost.append(text)
        out.append(
            CompactionFigures(
                compaction_id=pk,
                project_id=call.project_id,
                call=call,
                started_at=call.started_at,
                ratio_r=comp.tokens_after / comp.tokens_before if comp.tokens_before else None,
                distortion_d=len(failed) / checked if checked else None,
                checked=checked,
                failed=bool(failed),
                lost_fields=lost,
                failed_names=[inv.name for inv in failed],
            )
        )
    return out
