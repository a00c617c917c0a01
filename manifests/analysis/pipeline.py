"""The analysis pipeline: which calls are analysed, in which chunks and transactions, and what
happens to a call whose analysis fails (docs/analysis.md).

- :func:`analyze_calls` analyses the given calls in chunks. Each chunk is one
  transaction that locks its calls, replaces every row derived from them, marks
  them analysed and marks the rollup buckets they touch dirty (refreshed by the
  ``refresh_rollups`` beat task, or at the end of the call when the rollup interval
  is 0, the embedded default: ``rollups``). A call already analysed is skipped, so a
  redelivered task changes nothing; a worker killed mid-chunk leaves nothing
  half-written (the transaction rolls back).
- :func:`sweep_unanalysed` finds calls stored but never analysed (Redis down at
  ingest, a task lost) and analyses them, chunk after chunk, until none older than
  the minimum age remains or the run's bound is reached.

Poison isolation: a chunk whose analysis raises (anything but a transient database
or time-limit error) is rolled back and retried call by call; a call that fails on its
own is quarantined (``quarantined_at``, ``analysis_error``) and skipped by tasks and the
sweep until ``manage.py reanalyse_calls --quarantined`` tries it again after a fix.
"""

from __future__ import annotations

import logging
import os
import random
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from celery.exceptions import SoftTimeLimitExceeded
from django.db import DatabaseError, DataError, OperationalError, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from ctxview.celery import SWEEP_MAX_CALLS, SWEEP_MAX_SECONDS
from manifests.analysis import attribution, cache, compaction_review, facts, figures, regressions, rereads, rollups
from manifests.analysis.data import load
from manifests.analysis.prices import PriceBook
from manifests.models import Attribution, Call, CallFigures, CompactionFigures, Project, ReRead

logger = logging.getLogger(__name__)

__all__ = ["analyze_calls", "sweep_unanalysed"]

DEFAULT_CHUNK = 100
# The sweep claims bigger chunks: fewer transactions and lock round trips for a backlog
# (docs/performance.md, "Ingest storm"). A chunk only marks the rollup buckets it touches
# dirty, so the chunk size matters less than the number of transactions.
DEFAULT_SWEEP_CHUNK = 500


def _is_poison(exc: Exception) -> bool:
    """A failure of the data, not of the database or the worker. Database errors other than
    DataError (a value the column cannot hold) and time limits propagate instead: the task
    retries with backoff, or the sweep tries later, and nothing is quarantined."""
    if isinstance(exc, SoftTimeLimitExceeded):
        return False
    return not isinstance(exc, DatabaseError) or isinstance(exc, DataError)


def _chunk_size(name: str = "CTXVIEW_ANALYSIS_CHUNK", default: int = DEFAULT_CHUNK) -> int:
    try:
        return max(1, int(os.environ.get(name, default)))
    except ValueError:
        return default


Notify = Callable[[list[int]], None]


def _later_with_missing(calls: list[Call], watched_runs: set[int]) -> list[Call]:
    """Analysed calls lacking evidence at later steps of the runs of ``calls`` (which
    declare evidence), and every analysed later call of ``watched_runs`` (runs whose project
    watches facts: an earlier step may make a fact required there, facts.py): usually none,
    as calls arrive in step order. Locked like the chunk's
    own calls (FOR NO KEY UPDATE: a plain FOR UPDATE would block another worker's commit-time
    foreign-key check on these rows while that worker holds a prefix entry or rollup this one
    waits for, a deadlock seen with two worker nodes, bench/cluster.py); one that another
    worker holds is left to it."""
    first_step: dict[int, int] = {}
    for c in calls:
        if c.evidence_count or c.run_id in watched_runs:
            first_step[c.run_id] = min(c.step, first_step.get(c.run_id, c.step))
    if not first_step:
        return []
    query = Q()
    for run_id, step in first_step.items():
        query |= Q(run_id=run_id, step__gt=step) & (Q() if run_id in watched_runs else Q(evidence_missing__gt=0))
    return list(
        Call.objects.select_for_update(skip_locked=True, no_key=True)
        .filter(query, analyzed_at__isnull=False)
        .exclude(pk__in=[c.pk for c in calls])
        .order_by("pk")
    )


def _claim_ids(ids: Sequence[int], *, force: bool) -> QuerySet[Call]:
    query = Call.objects.filter(pk__in=list(ids))
    if not force:
        query = query.filter(analyzed_at__isnull=True, quarantined_at__isnull=True)
    # Locked in primary-key order; calls another worker holds are skipped (left to it).
    return query.select_for_update(skip_locked=True, no_key=True).order_by("pk")


# PostgreSQL's serialization failure and deadlock: the chunk is simply run again.
_RETRY_SQLSTATES = frozenset({"40001", "40P01"})
CHUNK_ATTEMPTS = 4


def _analyze_chunk(claim: QuerySet[Call], *, force: bool, notify: Notify | None) -> tuple[int, int]:
    """:func:`_analyze_once`, run again after a deadlock or serialization failure (a few
    times, after a short jittered pause), so a collision between workers costs a chunk,
    not the task."""
    for attempt in range(CHUNK_ATTEMPTS):
        try:
            return _analyze_once(claim, force=force, notify=notify)
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) not in _RETRY_SQLSTATES or attempt + 1 == CHUNK_ATTEMPTS:
                raise
            logger.info("analysis chunk hit %s; running it again", exc.__cause__.__class__.__name__)
            time.sleep(random.uniform(0, 0.1 * 2**attempt))
    raise AssertionError("unreachable")


def _analyze_once(claim: QuerySet[Call], *, force: bool, notify: Notify | None) -> tuple[int, int]:
    """Analyse the calls ``claim`` locks, in one transaction. Returns (analysed, claimed).

    If the analysis raises, the transaction rolls back and the claimed calls are analysed
    one by one: the good ones pass, the one that fails alone is quarantined.

    Calls are locked FOR NO KEY UPDATE: the foreign-key checks another worker's rows make
    at commit (a cache event pointing at its previous call, in this chunk) do not wait on
    it, so two chunks holding calls of the same run cannot deadlock on each other."""
    claimed: list[int] = []
    try:
        with transaction.atomic():
            calls = list(claim.all())  # a fresh query (and lock) on every attempt
            claimed = [c.pk for c in calls]
            if not calls:
                return 0, 0
            _analyze_locked(calls, notify=notify)
        return len(calls), len(calls)
    except Exception as exc:
        if not claimed or not _is_poison(exc):
            raise
        if len(claimed) == 1:
            _quarantine(claimed[0], exc)
            return 0, 1
        logger.warning(
            "analysis of a chunk of %d calls failed (%s: %s); retrying them one by one",
            len(claimed), exc.__class__.__name__, exc,
        )
        done = 0
        for pk in claimed:
            done += _analyze_chunk(_claim_ids([pk], force=force), force=force, notify=notify)[0]
        return done, len(claimed)


def _quarantine(pk: int, exc: Exception) -> None:
    """Set a call aside with its error (class, message, where it was raised)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    error = f"{exc.__class__.__name__}: {exc}{where}"[:2000]
    Call.objects.filter(pk=pk).update(quarantined_at=timezone.now(), analysis_error=error)
    logger.error("call %s quarantined: its analysis fails on its own (%s)", pk, error)


# The advisory-lock key space of the per-run analysis locks (two-int form, which never
# overlaps ingest's one-bigint call-id locks).
RUN_LOCK_SPACE = 0x6376  # "cv"


def _serialise_runs(calls: list[Call]) -> None:
    """Analyse two chunks holding calls of one run one after the other (PostgreSQL).

    A call's attributions and cache event are derived from the calls of its run stored when
    its chunk reads them. A chunk analysing an earlier step that arrived late derives the
    later, analysed steps again (:func:`_later_with_missing`, the successor's cache event),
    but it cannot see a later step that another worker is analysing at that moment (not
    committed yet), and that worker read the run before the earlier step was stored: both
    commit, and the later step keeps a cause traced without the earlier one (seen with two
    worker nodes, tests/pipeline/test_worker.py). A transaction-level advisory lock per run,
    taken in one global order after the claim and before anything is read, makes the second
    chunk wait until the first committed, and then see its calls. Only locks of this kind
    are waited for before it, so it cannot close a cycle. SQLite serialises writers already."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_xact_lock(%s, k)) FROM "
            "(SELECT DISTINCT (r %% 2147483647)::int AS k FROM unnest(%s::bigint[]) AS r ORDER BY k) AS s",
            [RUN_LOCK_SPACE, sorted({c.run_id for c in calls})],
        )


def _analyze_locked(calls: list[Call], *, notify: Notify | None) -> None:
    _serialise_runs(calls)
    newly = [c for c in calls if c.analyzed_at is None]
    pks = [c.pk for c in calls]
    prices = PriceBook.load()
    data = load(calls)

    new_figures: list[CallFigures] = []
    new_attributions: list[Attribution] = []
    new_reviews: list[CompactionFigures] = []
    # Calls of the same runs at later steps, already analysed and lacking evidence: the
    # trace of their causes runs through these calls, so theirs are derived again.
    watches = facts.watches_of({c.project_id for c in calls})
    later = load(_later_with_missing(calls, facts.runs_with_watches(calls, watches)))
    # The watched facts become evidence entries (and compaction invariants) of the calls,
    # stored and in their manifests, before anything reads either.
    facts.apply(data + later, watches)
    history = attribution.RunHistory(data + later, extend=facts.stored_extension)
    for d in data:
        positions = figures.relative_positions(d.manifest)
        new_figures.append(figures.compute(d, prices.for_model(d.call.model), positions))
        done = new_figures[-1]
        new_attributions.extend(attribution.attribute(d, positions, history, (done.cost, done.cost_usd)))
        new_reviews.extend(compaction_review.review(d))
    # The later calls keep their figures: their attributions carry the cost stored there.
    costs = figures.stored_costs([d.call for d in later])
    for d in later:
        cost = costs.get(d.call.pk)
        if cost is None:  # no figures stored: the costs the analysis would store
            cost = figures.cost(d, prices.for_model(d.call.model))
        new_attributions.extend(attribution.attribute(d, figures.relative_positions(d.manifest), history, cost))
        new_reviews.extend(compaction_review.review(d))
    # Replace, never add to: what was derived before from these calls goes first.
    later_pks = [d.call.pk for d in later]
    CallFigures.objects.filter(call_id__in=pks).delete()
    Attribution.objects.filter(call_id__in=pks + later_pks).delete()
    CompactionFigures.objects.filter(call_id__in=pks + later_pks).delete()
    CallFigures.objects.bulk_create(new_figures, batch_size=500)
    Attribution.objects.bulk_create(new_attributions, batch_size=500)
    CompactionFigures.objects.bulk_create(new_reviews, batch_size=500)
    reread = rereads.derive(calls)
    ReRead.objects.filter(call_id__in=reread.calls | set(pks)).delete()
    ReRead.objects.bulk_create(reread.rows, batch_size=500)

    now = timezone.now()
    Call.objects.filter(pk__in=pks).update(analyzed_at=now, quarantined_at=None, analysis_error="")
    successors = cache.update_cache_events(pks, prices)
    cache.update_prefix_registry(newly)
    projects = Project.objects.in_bulk({c.project_id for c in calls})
    found = regressions.detect(calls, projects)
    touched = [(c.project_id, c.started_at, c.agent, c.model) for c in calls + [d.call for d in later]]
    touched += [(s["project_id"], s["started_at"], s["agent"], s["model"]) for s in successors]
    rollups.mark(touched)
    webhooks = [r.pk for r in found if projects[r.project_id].webhook_url]
    if webhooks and notify is not None:  # else the notification sweep sends them
        transaction.on_commit(partial(notify, webhooks))


def analyze_calls(call_ids: Sequence[int], *, force: bool = False, notify: Notify | None = None) -> int:
    """Analyse the given calls; returns how many were analysed now.

    Calls already analysed or quarantined are skipped unless ``force`` (re-analysis
    after a rule change or a fix), and calls locked by another worker are left to it.
    ``notify(regression_ids)`` runs after each chunk commits with the new regressions whose
    project has a webhook.
    """
    ids = sorted(set(call_ids))
    size = _chunk_size()
    done = 0
    with _refreshing_rollups():
        for start in range(0, len(ids), size):
            claim = _claim_ids(ids[start : start + size], force=force)
            done += _analyze_chunk(claim, force=force, notify=notify)[0]
    return done


@contextmanager
def _refreshing_rollups() -> Iterator[None]:
    """With the rollup interval 0 (no beat: the embedded default), refresh the dirty
    buckets once the analysis is done, also when it stopped half-way (its finished chunks
    are committed and marked). With an interval, the beat task does it."""
    if rollups.interval_seconds() > 0:
        yield
        return
    try:
        yield
    except BaseException:
        try:
            rollups.refresh()
        except Exception:  # the analysis error is the one to raise; the marks stay
            logger.exception("refreshing the rollups after a failed analysis failed too")
        raise
    rollups.refresh()


def _waiting(cutoff: object) -> QuerySet[Call]:
    return Call.objects.filter(analyzed_at__isnull=True, quarantined_at__isnull=True, received_at__lte=cutoff)


@dataclass(frozen=True)
class SweepResult:
    analysed: int
    quarantined: int
    remaining: int  # unanalysed calls older than the minimum age when the run ended
    cut_short: bool  # the run stopped at its bound, not because nothing was left


def sweep_unanalysed(
    *, older_than_seconds: float = 60, max_calls: int = SWEEP_MAX_CALLS, max_seconds: float = SWEEP_MAX_SECONDS,
    notify: Notify | None = None,
) -> SweepResult:
    """Analyse calls stored at least ``older_than_seconds`` ago and never analysed.

    Claims chunk after chunk (oldest first, ``SKIP LOCKED``: sweeps running at once on
    several workers take different chunks) until none is left or the run has claimed
    ``max_calls`` or spent ``max_seconds``; the task enqueues a continuation when a run
    was cut short with calls still waiting.
    """
    started = time.monotonic()
    size = _chunk_size("CTXVIEW_SWEEP_CHUNK", DEFAULT_SWEEP_CHUNK)
    analysed = claimed = chunks = 0
    cut_short = True
    with _refreshing_rollups():
        while claimed < max_calls and time.monotonic() - started < max_seconds:
            cutoff = timezone.now() - timedelta(seconds=older_than_seconds)
            claim = _waiting(cutoff).select_for_update(skip_locked=True, no_key=True).order_by("received_at", "pk")
            done, taken = _analyze_chunk(claim[: min(size, max_calls - claimed)], force=False, notify=notify)
            if not taken:
                cut_short = False
                break
            analysed, claimed, chunks = analysed + done, claimed + taken, chunks + 1
    remaining = _waiting(timezone.now() - timedelta(seconds=older_than_seconds)).count()
    if claimed or remaining:
        logger.info(
            "sweep analysed %d calls (%d quarantined) in %d chunks in %.1f s; %d unanalysed calls "
            "older than %gs remain",
            analysed, claimed - analysed, chunks, time.monotonic() - started, remaining, older_than_seconds,
        )
    return SweepResult(analysed, claimed - analysed, remaining, cut_short and remaining > 0)
