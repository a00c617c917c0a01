"""Analysis of stored calls (docs/analysis.md): per-call figures, drop attribution,
cache causes, regressions, the prefix registry, compaction review and rollups.

Entry points, called by the Celery tasks in manifests/tasks.py (this package never imports
them: a caller that wants webhooks sent passes ``notify``, which runs after each commit):

- :func:`analyze_calls` analyses the given calls in chunks. Each chunk is one
  transaction that locks its calls, replaces every row derived from them, marks
  them analysed and recomputes the rollup buckets they touch. A call already
  analysed is skipped, so a redelivered task changes nothing; a worker killed
  mid-chunk leaves nothing half-written (the transaction rolls back).
- :func:`sweep_unanalysed` finds calls stored but never analysed (Redis down at
  ingest, a task lost) and analyses them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from manifests.analysis import attribution, cache, compaction_review, figures, regressions, rollups
from manifests.analysis.data import load
from manifests.analysis.prices import PriceBook
from manifests.models import Attribution, Call, CallFigures, CompactionFigures, Project

logger = logging.getLogger(__name__)

__all__ = ["analyze_calls", "sweep_unanalysed"]

DEFAULT_CHUNK = 100


def _chunk_size() -> int:
    try:
        return max(1, int(os.environ.get("CTXVIEW_ANALYSIS_CHUNK", DEFAULT_CHUNK)))
    except ValueError:
        return DEFAULT_CHUNK


def _test_pause(chunk_index: int) -> None:
    """Test-only hook for the fault tests (tests/test_pipeline_worker.py): with
    CTXVIEW_TEST_PAUSE_FILE set, the chunk number CTXVIEW_TEST_PAUSE_AT_CHUNK writes that
    file and sleeps CTXVIEW_TEST_PAUSE_SECONDS inside its open transaction, so a test can
    kill the worker in the middle of a task. Unset in production: one getenv per chunk."""
    path = os.environ.get("CTXVIEW_TEST_PAUSE_FILE")
    if not path or chunk_index != int(os.environ.get("CTXVIEW_TEST_PAUSE_AT_CHUNK", "0")):
        return
    with open(path, "w") as marker:
        marker.write(str(os.getpid()))
    time.sleep(float(os.environ.get("CTXVIEW_TEST_PAUSE_SECONDS", "60")))


Notify = Callable[[list[int]], None]


def _later_with_missing(calls: list[Call]) -> list[Call]:
    """Analysed calls lacking evidence at later steps of the runs of ``calls`` (which
    declare evidence): usually none, as calls arrive in step order. Locked like the chunk's
    own calls; one that another worker holds is left to it."""
    first_step: dict[int, int] = {}
    for c in calls:
        if c.evidence_count:
            first_step[c.run_id] = min(c.step, first_step.get(c.run_id, c.step))
    if not first_step:
        return []
    query = Q()
    for run_id, step in first_step.items():
        query |= Q(run_id=run_id, step__gt=step)
    return list(
        Call.objects.select_for_update(skip_locked=True)
        .filter(query, analyzed_at__isnull=False, evidence_missing__gt=0)
        .exclude(pk__in=[c.pk for c in calls])
        .order_by("pk")
    )


def _analyze_chunk(ids: Sequence[int], *, force: bool, chunk_index: int, notify: Notify | None) -> int:
    with transaction.atomic():
        query = Call.objects.select_for_update(skip_locked=True).filter(pk__in=list(ids))
        if not force:
            query = query.filter(analyzed_at__isnull=True)
        # Locked in primary-key order: two workers never wait on each other in a cycle.
        calls = list(query.order_by("pk"))
        if not calls:
            return 0
        newly = [c for c in calls if c.analyzed_at is None]
        pks = [c.pk for c in calls]
        prices = PriceBook.load()
        data = load(calls)

        new_figures: list[CallFigures] = []
        new_attributions: list[Attribution] = []
        new_reviews: list[CompactionFigures] = []
        # Calls of the same runs at later steps, already analysed and lacking evidence: the
        # trace of their causes runs through these calls, so theirs are derived again.
        later = load(_later_with_missing(calls))
        history = attribution.RunHistory(data + later)
        for d in data:
            positions = figures.relative_positions(d.manifest)
            new_figures.append(figures.compute(d, prices.for_model(d.call.model), positions))
            new_attributions.extend(attribution.attribute(d, positions, history))
            new_reviews.extend(compaction_review.review(d))
        for d in later:
            new_attributions.extend(attribution.attribute(d, figures.relative_positions(d.manifest), history))
        # Replace, never add to: what was derived before from these calls goes first.
        CallFigures.objects.filter(call_id__in=pks).delete()
        Attribution.objects.filter(call_id__in=pks + [d.call.pk for d in later]).delete()
        CompactionFigures.objects.filter(call_id__in=pks).delete()
        CallFigures.objects.bulk_create(new_figures, batch_size=500)
        Attribution.objects.bulk_create(new_attributions, batch_size=500)
        CompactionFigures.objects.bulk_create(new_reviews, batch_size=500)

        now = timezone.now()
        Call.objects.filter(pk__in=pks).update(analyzed_at=now)
        successors = cache.update_cache_events(pks, prices)
        cache.update_prefix_registry(newly)
        projects = Project.objects.in_bulk({c.project_id for c in calls})
        found = regressions.detect(calls, projects)
        touched = [(c.project_id, c.started_at, c.agent, c.model) for c in calls + [d.call for d in later]]
        touched += [(s["project_id"], s["started_at"], s["agent"], s["model"]) for s in successors]
        rollups.recompute(rollups.keys_for(touched))
        _test_pause(chunk_index)
        webhooks = [r.pk for r in found if projects[r.project_id].webhook_url]
        if webhooks and notify is not None:  # else the notification sweep sends them
            transaction.on_commit(partial(notify, webhooks))
    return len(calls)


def analyze_calls(call_ids: Sequence[int], *, force: bool = False, notify: Notify | None = None) -> int:
    """Analyse the given calls; returns how many were analysed now.

    Calls already analysed are skipped unless ``force`` (re-analysis after a rule
    change), and calls locked by another worker are left to it. ``notify(regression_ids)``
    runs after each chunk commits with the new regressions whose project has a webhook.
    """
    ids = sorted(set(call_ids))
    size = _chunk_size()
    done = 0
    for index, start in enumerate(range(0, len(ids), size)):
        done += _analyze_chunk(ids[start : start + size], force=force, chunk_index=index, notify=notify)
    return done


def sweep_unanalysed(*, older_than_seconds: float = 60, limit: int = 500, notify: Notify | None = None) -> int:
    """Analyse calls stored at least ``older_than_seconds`` ago and never analysed."""
    cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
    ids = list(
        Call.objects.filter(analyzed_at__isnull=True, received_at__lte=cutoff)
        .order_by("received_at")
        .values_list("pk", flat=True)[:limit]
    )
    if not ids:
        return 0
    done = analyze_calls(ids, notify=notify)
    logger.info("sweep analysed %d of %d unanalysed calls", done, len(ids))
    return done
