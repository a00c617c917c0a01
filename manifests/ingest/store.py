"""Storing a batch: decide accepted, duplicate or rejected, write, retry, hand to analysis.

The hot path is built for speed (see docs/performance.md): the body is split into
raw manifests without parsing them (msgspec.Raw), each is decoded straight into
the shared ``ctxkit.manifest.Manifest`` type, and the whole batch is written in
one transaction with one statement per table (``COPY`` for items on PostgreSQL).
A bad manifest is rejected with the JSON path of every bad field and never blocks
the good ones beside it. The decoding, validation and duplicate-key rules live in
``door``; this module stores what passes: it decides accepted, duplicate or rejected,
retries a contended batch and hands the stored calls to analysis. The writes themselves
live in ``postgres`` (PostgreSQL's locks, lookup and pipelines, the duplicate-key proofs
during the foreign-key checks) and ``rows`` (the rows and the statements that write them).
"""

from __future__ import annotations

import contextvars
import functools
import gc
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgspec
from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from ctxkit.manifest import FieldError, Manifest
from manifests.ingest.door import (
    decode,
    decode_owing_proof,
    printable,
    rebase,
    slow_duplicate_errors,
    split_body,
)
from manifests.ingest.postgres import Unproven, lock_and_look_up, prove_while_checking, store_rows
from manifests.ingest.rows import (
    ITEM_COLUMNS,
    call_row,
    clean_text,
    digest,
    fill_workspaces,
    insert_rows,
    item_rows,
    register_keys,
    store_children,
    upsert_runs,
)
from manifests.models import Call, Item, Project
from manifests.storage import partitions

logger = logging.getLogger(__name__)

ACCEPTED = "accepted"
DUPLICATE = "duplicate"
REJECTED = "rejected"


# A manifest that passed the door: its index in the request, the manifest, its canonical bytes
# (their SHA-256 is its content hash, computed while the server stores the batch's items).
Valid = tuple[int, Manifest, bytes]


class Busy(Exception):
    """The database stayed contended (deadlock, serialization failure, lock timeout) after
    the bounded retries: answered 503 with Retry-After, which ctxkit's client retries."""

    retry_after_seconds = 1


@dataclass
class ManifestResult:
    index: int
    call_id: str | None
    status: str
    errors: list[FieldError] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = {"index": self.index, "call_id": self.call_id, "status": self.status}
        if self.errors:
            # A rejected manifest's keys and call_id may hold lone surrogates (Python's json
            # reads them); show them escaped so the answer itself is valid UTF-8.
            result["call_id"] = printable(self.call_id)
            result["errors"] = [{"path": printable(e.path), "message": printable(e.message)} for e in self.errors]
        return result


@dataclass
class IngestReport:
    results: list[ManifestResult]
    stored_call_ids: list[int]

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.count(ACCEPTED),
            "duplicates": self.count(DUPLICATE),
            "rejected": self.count(REJECTED),
            "results": [r.to_dict() for r in self.results],
        }


def _collector_paused(fn: Callable[..., IngestReport]) -> Callable[..., IngestReport]:
    """Run ``fn`` with Python's cyclic garbage collector paused (when it was running).

    A batch of 100 manifests allocates tens of thousands of container objects that live
    until the batch is stored (the decoded manifests, the rows of each COPY), none of them
    in a cycle: the collector would run many times per batch to find a few psycopg cursors
    and adapters, a noticeable share of the worker's CPU (docs/performance.md, "Ingest").
    Reference counting frees everything as usual; a cycle made
    meanwhile waits for the next collection.
    Process-wide: with threads, a batch may run paused or not, which changes nothing but time."""

    @functools.wraps(fn)
    def paused(*args: Any, **kwargs: Any) -> IngestReport:
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@_collector_paused
def ingest_body(*, project: Project, body: bytes) -> IngestReport:
    """Validate and store every manifest of a request body; see module docstring."""
    raws, prefix = split_body(body)
    results: list[ManifestResult] = []
    valid: list[Valid] = []
    # PostgreSQL: the duplicate-key proofs of non-canonical bytes are owed until the store,
    # which runs them while the server checks the batch's foreign keys (prove_while_checking).
    defer = connection.vendor == "postgresql"
    unproven: dict[int, bytes] = {}
    for index, raw in enumerate(raws):
        manifest, errors, call_id, canonical, owed = decode_owing_proof(raw, defer_proof=defer)
        if manifest is None:
            results.append(ManifestResult(index, call_id, REJECTED, rebase(errors, _path_prefix(prefix, index))))
            continue
        valid.append((index, manifest, canonical))
        results.append(ManifestResult(index, manifest.call_id, ACCEPTED))
        if owed is not None:
            unproven[index] = owed

    return _store_valid(project, valid, results, unproven=unproven, prefix=prefix)


def _path_prefix(prefix: str, index: int) -> str:
    return prefix.format(index) if "{}" in prefix else prefix


@_collector_paused
def ingest_manifests(*, project: Project, manifests: list[Manifest]) -> IngestReport:
    """Store manifests that are already decoded (OTLP spans mapped by manifests/ingest/otlp.py): the
    same checks, de-duplication and storage as a JSON body, without the JSON round trip."""
    results: list[ManifestResult] = []
    valid: list[Valid] = []
    for index, built in enumerate(manifests):
        # Through the same door as a JSON body: a Struct made in Python skips msgspec's range
        # and length checks, and the NUL rule applies to the bytes.
        manifest, errors, call_id, canonical = decode(msgspec.json.encode(built))
        if manifest is None:
            results.append(ManifestResult(index, call_id or built.call_id, REJECTED, errors))
            continue
        valid.append((index, manifest, canonical))
        results.append(ManifestResult(index, manifest.call_id, ACCEPTED))
    return _store_valid(project, valid, results)


def _store_valid(
    project: Project,
    valid: list[Valid],
    results: list[ManifestResult],
    *,
    unproven: dict[int, bytes] | None = None,
    prefix: str = "$",
) -> IngestReport:
    stored = _store_with_retries(project, valid, results, unproven or {}, prefix) if valid else []
    results.sort(key=lambda r: r.index)
    return IngestReport(results=results, stored_call_ids=stored)


# Bounded retries of a batch's transaction; the waits grow and carry full jitter so
# that requests which collided do not collide again in step.
STORE_ATTEMPTS = 4
RETRY_BASE_SECONDS = 0.05

# PostgreSQL's transient conflicts: serialization failure, deadlock; and a lock wait
# longer than the lock timeout (55P03), which SQLite reports as "database is locked".
_CONFLICT_SQLSTATES = frozenset({"40001", "40P01"})
_LOCK_TIMEOUT_SQLSTATE = "55P03"


def _transient_kind(exc: OperationalError) -> str | None:
    """ "conflict", "lock timeout", or None when the error is not transient."""
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate in _CONFLICT_SQLSTATES:
        return "conflict"
    if sqlstate == _LOCK_TIMEOUT_SQLSTATE or (sqlstate is None and "locked" in str(exc)):
        return "lock timeout"
    return None


def _store_with_retries(
    project: Project,
    valid: list[Valid],
    results: list[ManifestResult],
    unproven: dict[int, bytes],
    prefix: str,
) -> list[int]:
    """Store the valid manifests; every race ends as ``duplicate`` or ``conflict``.

    On PostgreSQL a batch first takes a transaction-level advisory lock per call_id (in
    one global order), so two requests holding the same call_id never insert it both:
    the second waits, then its lookup sees the first one's row. Should a unique-key error
    still happen (whichever API raised it: the ORM or psycopg's COPY, both wrapped into
    Django's IntegrityError here), the next attempt finds the stored row and answers
    duplicate or conflict. Deadlocks and serialization failures cannot arise from ingest's
    own statements (locks are taken in a fixed order) but are retried all the same; if
    every attempt fails the request is answered 503 + Retry-After, never 500. A lock wait
    that outlasted CTXVIEW_INGEST_LOCK_TIMEOUT_MS is retried once only, so a request stays
    well inside a server's timeout.
    """
    timeout_ms = settings.CTXVIEW_INGEST_LOCK_TIMEOUT_MS
    if connection.vendor == "sqlite":
        # Before BEGIN IMMEDIATE, which is where SQLite waits for another writer.
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
    lock_timeouts = 0
    attempt = 0
    what: str | None = None
    for attempt in range(STORE_ATTEMPTS):  # read after the loop
        try:
            with connection.wrap_database_errors:
                # The batch's days get their partitions first, in a short transaction of
                # their own (PostgreSQL; one catalog query when they exist already).
                # Days this process has seen are not asked again (partitions.forget_seen).
                partitions.ensure_days({partitions.day_of(m.started_at) for _, m, _ in valid}, use_seen=True)
                return _store(project, valid, results, unproven)
        except Unproven as exc:
            # Rare (a client that repeats keys): nothing was stored. Judge those manifests the
            # slow way, reject the ones that do repeat a key, and store the rest; every
            # remaining proof is settled, so this happens once per request at most.
            remaining = _judge(exc.indexes, valid, results, unproven, prefix)
            return _store_with_retries(project, remaining, results, {}, prefix) if remaining else []
        except IntegrityError:
            # Also what a row whose day's partition was dropped meanwhile raises: ask again.
            partitions.forget_seen()
            what = "a unique-key race"
        except OperationalError as exc:
            partitions.forget_seen()
            what = _transient_kind(exc)
            if what is None:
                raise
            lock_timeouts += what == "lock timeout"
            if lock_timeouts > 1:
                break
        for index, *_ in valid:
            results[index].status = ACCEPTED
            results[index].errors = []
        if attempt + 1 < STORE_ATTEMPTS:
            delay = random.uniform(0, RETRY_BASE_SECONDS * 2**attempt)
            logger.info("ingest hit %s; retrying in %.0f ms (attempt %d)", what, delay * 1000, attempt + 2)
            time.sleep(delay)
    logger.warning("ingest gave up after %d attempts of a contended batch (%s); answering 503", attempt + 1, what)
    raise Busy()


# Recorders that name a call by its provider's response id: the same model call captured live by
# the proxy and read later from the agent's transcript by ``ctxkit import`` (or the other way
# round) arrives twice under one call_id, with different content (builder, timings, warnings).
# The first copy stays; the second is a duplicate, not a conflict.
RESPONSE_ID_RECORDERS = frozenset({"ctxkit.proxy", "ctxkit.import"})


def _recorded_again(manifest: Manifest) -> bool:
    return manifest.builder is not None and manifest.builder.name in RESPONSE_ID_RECORDERS


def _conflict(call_id: str) -> FieldError:
    return FieldError(
        path="$.call_id",
        message=f"call_id {call_id!r} was already stored with different content; call_id is the "
        "idempotency key and must be unique per model call",
    )


def _judge(
    indexes: list[int],
    valid: list[Valid],
    results: list[ManifestResult],
    unproven: dict[int, bytes],
    prefix: str,
) -> list[Valid]:
    """The manifests the fast proof could not clear, parsed by Python's json: those that repeat
    a key are rejected with the same errors ``decode`` gives them. Returns the valid ones left,
    their statuses reset for the next attempt."""
    rejected = set()
    for index in indexes:
        errors, _ = slow_duplicate_errors(unproven[index])
        if errors:
            rejected.add(index)
            results[index].status = REJECTED
            results[index].errors = rebase(errors, _path_prefix(prefix, index))
    remaining = [row for row in valid if row[0] not in rejected]
    for index, *_ in remaining:
        results[index].status = ACCEPTED
        results[index].errors = []
    return remaining


@transaction.atomic
def _store(
    project: Project,
    valid: list[Valid],
    results: list[ManifestResult],
    unproven: dict[int, bytes],
) -> list[int]:
    # The idempotency registry (CallKey: unique per project on every database) decides
    # duplicate or conflict; the calls table is partitioned by time and cannot.
    existing, reserved = lock_and_look_up(project, [m.call_id for _, m, _ in valid])
    to_store: list[tuple[Manifest, bytes]] = []
    seen: dict[str, bytes] = {}
    again: list[Manifest] = []  # copies recorded again whose workspace may fill their run's
    for index, manifest, canonical in valid:
        previous = existing.get(manifest.call_id)
        if previous is None and manifest.call_id in seen:
            previous = digest(seen[manifest.call_id])
        if previous is not None:
            if previous == digest(canonical) or _recorded_again(manifest):
                results[index].status = DUPLICATE
                if manifest.workspace is not None and _recorded_again(manifest):
                    again.append(manifest)
            else:
                results[index].status = REJECTED
                results[index].errors = [_conflict(manifest.call_id)]
            continue
        seen[manifest.call_id] = canonical
        to_store.append((manifest, canonical))
    if not to_store:
        # Duplicates too are answered only for bytes without a repeated key.
        prove_while_checking(unproven, wrote=False)
        fill_workspaces(project, again)
        return []

    # Rows in call_id order: any two writers meet their rows in the same order.
    to_store.sort(key=lambda row: row[0].call_id)
    manifests = [m for m, _ in to_store]
    if reserved:
        call_pks = store_rows(project, to_store, reserved[: len(to_store)])
    else:  # SQLite: the calls first (their ids), then their registry rows and children
        digests = [digest(canonical) for _, canonical in to_store]
        runs = upsert_runs(project, manifests)
        now = timezone.now()
        calls = [
            call_row(project, runs[clean_text(m.run_id)], m, canonical, content_hash, now)
            for (m, canonical), content_hash in zip(to_store, digests)
        ]
        call_pks = insert_rows(Call, calls)
        register_keys(project, calls, call_pks)
        rows = item_rows(project.pk, manifests, call_pks)
        Item.objects.bulk_create([Item(**dict(zip(ITEM_COLUMNS, row))) for row in rows], batch_size=500)
        store_children(project, manifests, call_pks)
    prove_while_checking(unproven, wrote=True)
    fill_workspaces(project, again)
    transaction.on_commit(partial(_on_commit_analysis, call_pks))
    return call_pks


# The analysis batches of a request whose view hands them to the broker after its response
# (``analysis_after_response``); None: enqueued when the transaction commits.
_held_analysis: contextvars.ContextVar[list[list[int]] | None] = contextvars.ContextVar(
    "ctxview_held_analysis", default=None
)


@contextmanager
def analysis_after_response() -> Iterator[list[list[int]]]:
    """Inside, the analysis of each committed batch is held in the list yielded instead of
    being enqueued; the caller enqueues it (``enqueue_analyses``) once its response is sent:
    publishing to the broker is a few ms a batch that the client need not wait for. A worker
    that dies in between loses nothing: the calls stay unanalysed and the periodic sweep
    analyses them. Without a broker (Celery eager) the analysis runs at commit, as always."""
    from manifests.tasks import analyze_calls

    if analyze_calls.app.conf.task_always_eager:
        yield []
        return
    held: list[list[int]] = []
    token = _held_analysis.set(held)
    try:
        yield held
    except BaseException:
        enqueue_analyses(held)  # no response will be sent to hand them over
        raise
    finally:
        _held_analysis.reset(token)


def enqueue_analyses(held: list[list[int]]) -> None:
    """Enqueue what ``analysis_after_response`` held (one task per stored batch)."""
    for call_pks in held:
        _enqueue_analysis(call_pks)
    held.clear()


def _on_commit_analysis(call_pks: list[int]) -> None:
    held = _held_analysis.get()
    if held is not None:
        held.append(call_pks)
    else:
        _enqueue_analysis(call_pks)


def _enqueue_analysis(call_pks: list[int]) -> None:
    """One analysis task per stored batch. If the broker is down the calls stay
    unanalysed (analyzed_at is NULL) and the periodic sweep picks them up."""
    from manifests.tasks import analyze_calls

    try:
        analyze_calls.delay(call_pks)
    except Exception:  # broker down or misconfigured: never fail the ingest
        logger.warning("could not enqueue analysis of %d calls; the sweep will analyse them", len(call_pks))
