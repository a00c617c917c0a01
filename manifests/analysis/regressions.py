"""Cache-hit regressions across runs, per project / agent / model.

The rule (docs/analysis.md, "Regressions"): order the calls of one agent and model
by time. At each call, the *current* rate is the token-weighted hit rate
(sum of cache reads / sum of input tokens) of the last W calls, and the *baseline*
is the same rate over the W calls before those (W = the project's
``regression_window_calls``). A regression is recorded at the call where
baseline - current first exceeds the project's ``regression_threshold_points``
(in percentage points); while the drop lasts no new one is recorded, and once the
rate recovers a later drop is a new regression. Each is stored with the prefix
that dominated each window, so a changed system prompt or tool list shows at once.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django.db.models import Q

from ctxkit.figures import hit_rate
from manifests.analysis.cache_causes import first_changed_segment
from manifests.analysis.data import clean
from manifests.models import CacheEvent, Call, Project, Regression

logger = logging.getLogger(__name__)

SPAN_LIMIT = 20_000  # beyond this many calls between a chunk's first and last, go call by call
_FIELDS = ("pk", "started_at", "input_tokens", "cache_read_tokens", "prefix_hash")


def _rate(rows: Sequence[dict[str, Any]]) -> float | None:
    """The window's hit rate: ctxkit.figures.hit_rate of its summed tokens."""
    return hit_rate(sum(r["cache_read_tokens"] for r in rows), sum(r["input_tokens"] for r in rows))


def drop_at(seq: Sequence[dict[str, Any]], end: int, window: int) -> tuple[float, float, float] | None:
    """(drop in points, baseline, current) for the windows ending at seq[end]; None
    when there are not yet two full windows or a window has no input tokens."""
    if end + 1 < 2 * window:
        return None
    current = _rate(seq[end + 1 - window : end + 1])
    baseline = _rate(seq[end + 1 - 2 * window : end + 1 - window])
    if current is None or baseline is None:
        return None
    return (baseline - current) * 100.0, baseline, current


def _mode(rows: Sequence[dict[str, Any]]) -> str:
    """The prefix hash most calls of the window had (the latest one on a tie)."""
    counts = Counter(r["prefix_hash"] for r in rows if r["prefix_hash"])
    if not counts:
        return ""
    best = max(counts.values())
    mode: str = next(r["prefix_hash"] for r in reversed(rows) if counts.get(r["prefix_hash"]) == best)
    return mode


def _segments(project_id: int, prefix_hash: str) -> list[dict[str, Any]]:
    if not prefix_hash:
        return []
    row = Call.objects.filter(project_id=project_id, prefix_hash=prefix_hash).values("prefix_segments").first()
    return list(row["prefix_segments"] or []) if row else []


def _before(base: Any, call: Call, count: int, *, inclusive: bool) -> list[dict[str, Any]]:
    """Up to ``count`` calls of the group at or before ``call``, oldest first."""
    at = Q(started_at=call.started_at, pk__lte=call.pk) if inclusive else Q(started_at=call.started_at, pk__lt=call.pk)
    earlier = base.filter(Q(started_at__lt=call.started_at) | at).order_by("-started_at", "-pk")
    rows = list(earlier.values(*_FIELDS)[:count])
    rows.reverse()
    return rows


def _sequence(project: Project, agent: str, model: str, group: list[Call]) -> list[dict[str, Any]] | None:
    """The group's calls from 2W before the chunk's first one through its last one."""
    window = project.regression_window_calls
    base = Call.objects.filter(project_id=project.pk, agent=agent, model=model)
    first, last = group[0], group[-1]
    head = _before(base, first, 2 * window, inclusive=False)
    span = list(
        base.filter(Q(started_at__gt=first.started_at) | Q(started_at=first.started_at, pk__gte=first.pk))
        .filter(Q(started_at__lt=last.started_at) | Q(started_at=last.started_at, pk__lte=last.pk))
        .order_by("started_at", "pk")
        .values(*_FIELDS)[: SPAN_LIMIT + 1]
    )
    if len(span) > SPAN_LIMIT:
        return None
    return head + span


def _first_with_new_prefix(seq: Sequence[dict[str, Any]], end: int, prefix_before: str) -> int:
    """Index of the first call of the streak, ending at ``end``, of calls without the
    baseline prefix: where the new prefix (or the first of many, with a per-call value
    such as a timestamp) arrived, often minutes before the rate crossed the threshold."""
    start = end
    while start > 0 and seq[start - 1]["prefix_hash"] and seq[start - 1]["prefix_hash"] != prefix_before:
        start -= 1
    return start


def _store(project: Project, agent: str, model: str, call: Call, seq: list[dict[str, Any]], end: int,
           found: tuple[float, float, float]) -> Regression | None:
    window = project.regression_window_calls
    drop, baseline, current = found
    before_rows = seq[end + 1 - 2 * window : end + 1 - window]
    after_rows = seq[end + 1 - window : end + 1]
    # Before: the prefix most baseline calls shared. After: the prefix of the call
    # where the drop crossed the threshold. (The most common prefix of the current
    # window would hide a per-call value such as a timestamp: every call then has
    # its own prefix and the old one stays the most common.)
    prefix_before, prefix_after = _mode(before_rows), seq[end]["prefix_hash"] or _mode(after_rows)
    segments_before = _segments(project.pk, prefix_before)
    segments_after = segments_before if prefix_after == prefix_before else _segments(project.pk, prefix_after)
    changed_segment = ""
    first_call_pk = None
    if prefix_before and prefix_after and prefix_before != prefix_after:
        cause = CacheEvent.PREFIX_CHANGED
        first_call_pk = seq[_first_with_new_prefix(seq, end, prefix_before)]["pk"]
        changed_segment, _ = first_changed_segment(segments_before, segments_after)
    else:
        causes = Counter(
            CacheEvent.objects.filter(call_id__in=[r["pk"] for r in after_rows])
            .exclude(cause=CacheEvent.HIT)
            .values_list("cause", flat=True)
        )
        cause = causes.most_common(1)[0][0] if causes else "unknown"
    regression, created = Regression.objects.get_or_create(
        project=project,
        agent=agent,
        model=model,
        call=call,
        defaults={
            "detected_at": call.started_at,
            "window_calls": window,
            "threshold_points": project.regression_threshold_points,
            "baseline_rate": baseline,
            "current_rate": current,
            "drop_points": drop,
            "prefix_before": prefix_before,
            "prefix_after": prefix_after,
            "segments_before": segments_before,
            "segments_after": segments_after,
            "changed_segment": clean(changed_segment)[:200],
            "cause": cause,
            "first_call_id": first_call_pk,
        },
    )
    return regression if created else None


def detect(calls: list[Call], projects: dict[int, Project]) -> list[Regression]:
    """Regressions that appear at the given calls; returns the newly recorded ones."""
    groups: dict[tuple[int, str, str], list[Call]] = {}
    for c in calls:
        groups.setdefault((c.project_id, c.agent, c.model), []).append(c)
    created: list[Regression] = []
    for (project_id, agent, model), group in groups.items():
        project = projects[project_id]
        window = project.regression_window_calls
        if window <= 0:
            continue
        group.sort(key=lambda c: (c.started_at, c.pk))
        seq = _sequence(project, agent, model, group)
        index = {r["pk"]: i for i, r in enumerate(seq)} if seq is not None else {}
        for call in group:
            if seq is None:  # a huge span: this call's own windows only
                local = _before(Call.objects.filter(project_id=project_id, agent=agent, model=model), call,
                                2 * window + 1, inclusive=True)
                end = len(local) - 1
            else:
                local, end = seq, index[call.pk]
            found = drop_at(local, end, window)
            if found is None or found[0] <= project.regression_threshold_points:
                continue
            previous = drop_at(local, end - 1, window) if end > 0 else None
            if previous is not None and previous[0] > project.regression_threshold_points:
                continue  # the same drop, already recorded where it began
            regression = _store(project, agent, model, call, local, end, found)
            if regression is not None:
                created.append(regression)
    return created
