"""Manifest ingestion: parse, validate, de-duplicate and store a batch.

The hot path is built for speed (see docs/performance.md): the body is split into
raw manifests without parsing them (msgspec.Raw), each is decoded straight into
the shared ``ctxkit.record.manifest.Manifest`` type, and the whole batch is written in
one transaction with one statement per table (``COPY`` for items on PostgreSQL).
A bad manifest is rejected with the JSON path of every bad field and never blocks
the good ones beside it. The decoding, validation and duplicate-key rules live in
``manifests/door.py``; this module stores what passes.
"""

from __future__ import annotations

import contextvars
import functools
import gc
import hashlib
import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

import msgspec
from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.utils import timezone

from ctxkit.record.manifest import FieldError, Manifest
from manifests import partitions
from manifests.door import (  # noqa: F401 - BadRequest, decode, validate, split_body, normalise_nul: re-exported
    BadRequest,
    decode,
    decode_owing_proof,
    normalise_nul,
    printable,
    rebase,
    slow_duplicate_errors,
    split_body,
    validate,
)
from manifests.dupkeys import no_duplicate_keys
from manifests.figures import ITEM_FIELDS
from manifests.models import Call, CallKey, Compaction, ContextEdit, Evidence, Invariant, Item, Project, Run

logger = logging.getLogger(__name__)

ACCEPTED = "accepted"
DUPLICATE = "duplicate"
REJECTED = "rejected"


# A manifest that passed the door: its index in the request, the manifest, its canonical bytes
# (their SHA-256 is its content hash, computed while the server stores the batch's items).
Valid = tuple[int, Manifest, bytes]


def _digest(canonical: bytes) -> str:
    return hashlib.sha256(canonical).hexdigest()


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
    in a cycle: the collector ran about 15 times per batch and found ≈ 140 objects (psycopg's
    cursors and adapters), ≈ 10 % of the worker's CPU per batch (docs/performance.md,
    "Ingest", fifth pass). Reference counting frees everything as usual; a cycle made
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
    # which runs them while the server checks the batch's foreign keys (_prove_while_checking).
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
    """Store manifests that are already decoded (OTLP spans mapped by manifests/otlp.py): the
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


class _Unproven(Exception):
    """Manifests whose fast duplicate-key proof failed during the store (their indexes): the
    transaction is rolled back, they are judged the slow way, and the rest stored again."""

    def __init__(self, indexes: list[int]) -> None:
        super().__init__(indexes)
        self.indexes = indexes


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
    for attempt in range(STORE_ATTEMPTS):  # noqa: B007 - read after the loop
        try:
            with connection.wrap_database_errors:
                # The batch's days get their partitions first, in a short transaction of
                # their own (PostgreSQL; one catalog query when they exist already).
                # Days this process has seen are not asked again (partitions.forget_seen).
                partitions.ensure_days({partitions.day_of(m.started_at) for _, m, _ in valid}, use_seen=True)
                return _store(project, valid, results, unproven)
        except _Unproven as exc:
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


_lz4: dict[str, bool] = {}


def _has_lz4(cursor: Any) -> bool:
    """Whether this PostgreSQL server was built with lz4 (asked once per process and database)."""
    name = connection.settings_dict["NAME"]
    if name not in _lz4:
        cursor.execute("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        row = cursor.fetchone()
        _lz4[name] = bool(row and row[0])
    return _lz4[name]


def _lock_key(project: Project, call_id: str | None) -> int:
    return int.from_bytes(
        hashlib.blake2b(f"{project.pk}\x1f{call_id}".encode(), digest_size=8).digest(), "big", signed=True
    )


def _lock_and_look_up(project: Project, call_ids: list[str]) -> tuple[dict[str, str], list[int]]:
    """Take the batch's locks and read the idempotency registry: ({call_id: content_hash} of
    the call_ids already stored, ids for the calls to store: one per call_id, ascending,
    from the calls' sequence; none on SQLite).

    On PostgreSQL, first the transaction's settings (lock timeout, lz4), then one advisory
    lock per call_id, then the registry lookup and the ids, sent as one pipeline: one round
    trip instead of five with the BEGIN (docs/performance.md). PostgreSQL runs them in order,
    so the lookup still runs after the locks are held. An id reserved and not used (a
    duplicate, a rolled-back attempt) is a gap in the sequence, as a rollback leaves anyway.
    The locks serialise the requests that store the same call_id (SQLite's writers are
    serialised already by its IMMEDIATE transactions); they are taken in ascending key order
    in one statement, so no two requests can wait on each other in a cycle, and no lock wait
    lasts longer than the lock timeout."""
    if connection.vendor != "postgresql":
        found = CallKey.objects.filter(project=project, call_key__in=call_ids).values_list("call_key", "content_hash")
        return dict(found), []
    keys = sorted({_lock_key(project, _clean(c)) for c in call_ids})
    with connection.cursor() as cursor:
        pg = cursor.connection
        sequence = _sequence(cursor, Call._meta.db_table)
        # The raw manifests (kilobytes of JSON each) are compressed by the server as they are
        # stored: lz4 does it several times faster than the default pglz, and every reader
        # decompresses either (docs/performance.md).
        toast = ", set_config('default_toast_compression', 'lz4', true)" if _has_lz4(cursor) else ""
        with pg.pipeline():
            settings_cursor, locks, lookup, ids = pg.cursor(), pg.cursor(), pg.cursor(), pg.cursor()
            settings_cursor.execute(
                f"SELECT set_config('lock_timeout', %s, true){toast}",
                [str(int(settings.CTXVIEW_INGEST_LOCK_TIMEOUT_MS))],
            )
            locks.execute(
                "SELECT count(pg_advisory_xact_lock(k)) FROM (SELECT k FROM unnest(%s::bigint[]) AS k ORDER BY k) AS s",
                [keys],
            )
            # One probe of the unique (project_id, call_key) index per call_id. The plainer
            # ``call_key = ANY(...)`` let the planner, on stale statistics (a new or fast-growing
            # project), scan every registry row of the project and filter: 6 ms per batch at
            # 24,000 rows, growing with the project (docs/performance.md, fourth pass).
            lookup.execute(
                "SELECT u.k, c.content_hash FROM unnest(%s::text[]) AS u(k) CROSS JOIN LATERAL "
                f"(SELECT content_hash FROM {CallKey._meta.db_table} WHERE project_id = %s AND call_key = u.k "
                "LIMIT 1) AS c",
                [call_ids, project.pk],
            )
            ids.execute("SELECT nextval(%s::regclass) FROM generate_series(1, %s)", [sequence, len(call_ids)])
        return dict(lookup.fetchall()), sorted(i for (i,) in ids.fetchall())


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


def _prove_while_checking(unproven: dict[int, bytes], *, wrote: bool) -> None:
    """The duplicate-key proofs ``ingest_body`` deferred, raising ``_Unproven`` for those that
    fail. When the batch wrote rows, PostgreSQL first gets ``SET CONSTRAINTS ALL IMMEDIATE``
    in a pipeline: it runs the deferred foreign-key checks of every row now (the work COMMIT
    would do, ≈ 4,700 checks per 100 manifests) while this process runs the proofs on the
    other core; the pipeline's end waits for both (docs/performance.md, fourth pass)."""
    if not unproven:
        return
    if wrote:
        with connection.cursor() as cursor:
            pg = cursor.connection
            with pg.pipeline():
                pg.cursor().execute("SET CONSTRAINTS ALL IMMEDIATE")
                failed = [index for index, raw in unproven.items() if not no_duplicate_keys(raw)]
    else:
        failed = [index for index, raw in unproven.items() if not no_duplicate_keys(raw)]
    if failed:
        raise _Unproven(failed)


@transaction.atomic
def _store(
    project: Project,
    valid: list[Valid],
    results: list[ManifestResult],
    unproven: dict[int, bytes],
) -> list[int]:
    # The idempotency registry (CallKey: unique per project on every database) decides
    # duplicate or conflict; the calls table is partitioned by time and cannot.
    existing, reserved = _lock_and_look_up(project, [m.call_id for _, m, _ in valid])
    to_store: list[tuple[Manifest, bytes]] = []
    seen: dict[str, bytes] = {}
    for index, manifest, canonical in valid:
        previous = existing.get(manifest.call_id)
        if previous is None and manifest.call_id in seen:
            previous = _digest(seen[manifest.call_id])
        if previous is not None:
            if previous == _digest(canonical):
                results[index].status = DUPLICATE
            else:
                results[index].status = REJECTED
                results[index].errors = [_conflict(manifest.call_id)]
            continue
        seen[manifest.call_id] = canonical
        to_store.append((manifest, canonical))
    if not to_store:
        # Duplicates too are answered only for bytes without a repeated key.
        _prove_while_checking(unproven, wrote=False)
        return []

    # Rows in call_id order: any two writers meet their rows in the same order.
    to_store.sort(key=lambda row: row[0].call_id)
    manifests = [m for m, _ in to_store]
    if reserved:
        call_pks = _store_rows(project, to_store, reserved[: len(to_store)])
    else:  # SQLite: the calls first (their ids), then their registry rows and children
        digests = [_digest(canonical) for _, canonical in to_store]
        runs = _upsert_runs(project, manifests)
        now = timezone.now()
        calls = [
            _call_row(project, runs[_clean(m.run_id)], m, canonical, digest, now)
            for (m, canonical), digest in zip(to_store, digests)
        ]
        call_pks = _insert(Call, calls)
        _register_keys(project, calls, call_pks)
        item_rows = _item_rows(project.pk, manifests, call_pks)
        Item.objects.bulk_create([Item(**dict(zip(ITEM_COLUMNS, row))) for row in item_rows], batch_size=500)
        _store_children(project, manifests, call_pks)
    _prove_while_checking(unproven, wrote=True)
    transaction.on_commit(partial(_on_commit_analysis, call_pks))
    return call_pks


def _store_rows(project: Project, to_store: list[tuple[Manifest, bytes]], call_pks: list[int]) -> list[int]:
    """PostgreSQL: the batch's rows, with the calls' ids reserved by ``_lock_and_look_up``.

    The items first (nothing references them, and they reference no call by key): while the
    server stores them, the longest step of a batch (4,000 rows per 100 manifests), this
    process computes the content hashes and builds the calls' and the evidence's rows and the
    runs' statement, work that otherwise kept the server waiting (docs/performance.md, fifth
    pass). Then the runs and the registry (one pipeline, ``_upsert_runs_and_register``; a
    unique-key race raises there), the calls, the evidence and the rest of the children."""
    manifests = [m for m, _ in to_store]
    digests: list[str] = []
    made: dict[str, Any] = {}

    def meanwhile() -> None:
        digests.extend(_digest(canonical) for _, canonical in to_store)
        now = timezone.now()
        # The run's id is filled in once the runs' upsert has answered.
        calls = [_call_row(project, 0, m, c, d, now) for (m, c), d in zip(to_store, digests)]
        made["calls"] = _values(Call, calls, call_pks)
        made["evidence"] = _values(Evidence, _evidence_rows(project, manifests, call_pks))
        made["runs"] = _runs_statement(project, manifests)

    with connection.cursor() as cursor:
        # COPY is the physical baseline (about 10x bulk_create for item rows). The rows are
        # made as they are sent: the server, not this process, sets the pace.
        rows = _iter_item_rows(project.pk, manifests, call_pks)
        _copy(cursor, Item._meta.db_table, list(ITEM_COLUMNS), rows, meanwhile=meanwhile)
        runs = _upsert_runs_and_register(project, manifests, digests, call_pks, made["runs"])
        columns, values = made["calls"]
        run_column = columns.index(Call._meta.get_field("run").column)
        for row, m in zip(values, manifests):
            row[run_column] = runs[_clean(m.run_id)]
        _copy(cursor, Call._meta.db_table, columns, values)
        columns, values = made["evidence"]
        if values:
            _copy(cursor, Evidence._meta.db_table, columns, values)
    _store_children(project, manifests, call_pks, [])
    return call_pks


def _register_keys(project: Project, calls: list[dict[str, Any]], call_pks: list[int]) -> None:
    """The idempotency registry's rows of the stored calls, on SQLite (a unique-key race raises
    here). PostgreSQL writes them with the runs (``_upsert_runs_and_register``)."""
    CallKey.objects.bulk_create(
        [
            CallKey(
                project_id=project.pk,
                call_key=c["call_id"],
                content_hash=c["content_hash"],
                call_id=pk,
                started_at=c["started_at"],
            )
            for c, pk in zip(calls, call_pks, strict=True)
        ]
    )


_sequences: dict[tuple[str, str], str] = {}


def _sequence(cursor: Any, table: str) -> str:
    """The name of a table's id sequence (asked once per process and database)."""
    key = (connection.settings_dict["NAME"], table)
    if key not in _sequences:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        _sequences[key] = cursor.fetchone()[0]
    return _sequences[key]


def _upsert_runs_and_register(
    project: Project,
    manifests: list[Manifest],
    digests: list[str],
    call_pks: list[int],
    runs_statement: tuple[str, list[Any]],
) -> dict[str, int]:
    """PostgreSQL: the runs' upsert (``_upsert_runs``) and the registry's rows (each with its
    call's reserved id) in one pipeline: one round trip, where they were two statements and
    a COPY. A unique-key race raises here. Returns {run_id: pk}. (The evidence rows joined to
    these in the same pipeline cost 7 ms more per batch than their own COPY: docs/performance.md.)
    ``runs_statement`` is ``_runs_statement``'s for these manifests."""
    run_sql, run_params = runs_statement
    keys = [_clean(m.call_id) for m in manifests]
    with connection.cursor() as cursor:
        pg = cursor.connection
        with pg.pipeline():
            runs, registered = pg.cursor(), pg.cursor()
            runs.execute(run_sql, run_params)
            registered.execute(
                f"INSERT INTO {CallKey._meta.db_table} (project_id, call_key, content_hash, call_id, started_at) "
                "SELECT %s, k, h, i, s FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::timestamptz[]) "
                "AS u(k, h, i, s)",
                [project.pk, keys, digests, call_pks, [m.started_at for m in manifests]],
            )
        return dict(runs.fetchall())


def _upsert_runs(project: Project, manifests: list[Manifest]) -> dict[str, int]:
    """Create the batch's missing runs and widen the others' time span (``_runs_statement``).
    Returns {run_id: pk}."""
    sql, params = _runs_statement(project, manifests)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def _runs_statement(project: Project, manifests: list[Manifest]) -> tuple[str, list[Any]]:
    """The runs' upsert: create the batch's missing runs and widen the others' time span, in
    one statement.

    ``INSERT ... ON CONFLICT DO UPDATE`` with LEAST/GREATEST (MIN/MAX on SQLite): the
    database widens ``first_seen``/``last_seen`` against the row's current values, under
    its row lock, so two concurrent batches can never overwrite each other's times (a
    read-then-write would), and rows are written in run_id order, so two batches
    sharing runs lock them in the same order and cannot deadlock. A run's agent, model
    and parent are those of the first batch that created it. It returns (run_id, id) rows.
    """
    bounds: dict[str, tuple[datetime, datetime, Manifest]] = {}
    for m in manifests:
        run_id = _clean(m.run_id)
        first, last, sample = bounds.get(run_id, (m.started_at, m.started_at, m))
        bounds[run_id] = (min(first, m.started_at), max(last, m.started_at), sample)
    table = Run._meta.db_table
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    when = connection.ops.adapt_datetimefield_value
    rows = sorted(bounds.items())
    placeholders = ", ".join(["(%s, %s, %s, %s, %s, %s, %s)"] * len(rows))
    params: list[Any] = []
    for run_id, (first, last, sample) in rows:
        params += [
            project.pk,
            run_id,
            _clean(sample.agent),
            _clean(sample.model),
            _clean(sample.parent_run_id),
            when(first),
            when(last),
        ]
    sql = (
        f"INSERT INTO {table} (project_id, run_id, agent, model, parent_run_id, first_seen, last_seen) "
        f"VALUES {placeholders} ON CONFLICT (project_id, run_id) DO UPDATE SET "
        f"first_seen = {least}({table}.first_seen, excluded.first_seen), "
        f"last_seen = {greatest}({table}.last_seen, excluded.last_seen) "
        "RETURNING run_id, id"
    )
    return sql, params


def _clean(value: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL; keep the rest of hostile text as data."""
    if value is not None and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


def _call_row(
    project: Project, run_pk: int, m: Manifest, canonical: bytes, digest: str, now: datetime
) -> dict[str, Any]:
    """A call's column values by attribute name (``_insert`` fills in the model's other defaults)."""
    usage = m.usage
    outcome = m.outcome
    prefix = m.prefix
    return dict(
        project_id=project.pk,
        run_id=run_pk,
        call_id=_clean(m.call_id),
        step=m.step,
        parent_call_id=_clean(m.parent_call_id),
        agent=_clean(m.agent),
        model=_clean(m.model),
        provider=_clean(m.provider),
        started_at=m.started_at,
        ended_at=m.ended_at,
        builder_name=_clean(m.builder.name) if m.builder else "",
        builder_version=_clean(m.builder.version) if m.builder else "",
        window=m.budget.window,
        output_reserve=m.budget.output_reserve,
        safety_margin=m.budget.safety_margin,
        input_cap=m.budget.effective_input_cap(),
        prefix_hash=_clean(prefix.hash) if prefix else "",
        prefix_tokens=prefix.tokens if prefix else 0,
        prefix_segments=msgspec.to_builtins(prefix.segments) if prefix else [],
        cache_ttl_seconds=m.cache_ttl_seconds,
        input_tokens=usage.input_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        status=_clean(outcome.status) if outcome else "",
        finish_reason=_clean(outcome.finish_reason or "") if outcome else "",
        verified=outcome.verified if outcome else "unknown",
        item_count=len(m.items),
        evidence_count=len(m.evidence),
        evidence_missing=sum(1 for e in m.evidence if not e.present),
        warnings=[_clean(w) for w in m.warnings],
        content_hash=digest,
        # Stored as text: the canonical bytes re-encoded by msgspec, so any "\u0000"
        # stays escaped and the column never holds a raw NUL.
        raw=canonical.decode(),
        received_at=now,
    )


# The call, the project and the manifest order, then an item's stored fields (written once).
ITEM_COLUMNS = ("call_id", "project_id", "ordinal", *ITEM_FIELDS, "started_at")


def _item_rows(project_id: int, manifests: list[Manifest], call_pks: list[int]) -> list[tuple[Any, ...]]:
    return list(_iter_item_rows(project_id, manifests, call_pks))


def _iter_item_rows(project_id: int, manifests: list[Manifest], call_pks: list[int]) -> Iterator[tuple[Any, ...]]:
    # No ``_clean`` here (it was a third of this loop's time, 28,000 calls per 100 manifests):
    # every manifest stored came through ``decode``, whose NUL rule already turned each
    # "\u0000" into U+FFFD, and a raw NUL byte is malformed JSON, so no string here holds one.
    return (
        (
            call_pk,
            project_id,
            ordinal,
            i.id,
            i.kind,
            i.action,
            i.trust,
            i.priority,
            i.pinned,
            i.zone,
            i.position,
            i.requested_tokens,
            i.granted_tokens,
            i.used_tokens,
            i.reason,
            i.source_ref,
            i.source_version,
            i.content_hash,
            i.group,
            i.text,
            m.started_at,  # the call's time: the partition key
        )
        for m, call_pk in zip(manifests, call_pks)
        for ordinal, i in enumerate(m.items)
    )


def _insert(
    model: type[Any],
    rows: list[dict[str, Any]],
    *,
    pks: list[int] | None = None,
    meanwhile: Callable[[], Any] | None = None,
) -> list[int]:
    """Insert rows (column values by attribute name; missing ones take the model's default)
    with the primary keys ``pks`` (PostgreSQL; reserved from the sequence as the registry's
    rows were written), or the table's own (``pks`` None); return the keys (SQLite: always).

    On PostgreSQL: COPY plain values (JSON columns as Python objects: psycopg encodes them
    for jsonb). Django's bulk_create binds the raw manifests (kilobytes each) as quoted array
    literals, which cost several times the COPY itself, and building model instances and
    preparing each field through Django cost as much again (docs/performance.md).
    ``meanwhile`` (PostgreSQL) runs once the rows are sent, before waiting for the server.
    """
    if connection.vendor != "postgresql":
        objs = [model(**row) for row in rows]
        model.objects.bulk_create(objs)
        return [obj.pk for obj in objs]
    columns, values = _values(model, rows, pks)
    with connection.cursor() as cursor:
        _copy(cursor, model._meta.db_table, columns, values, meanwhile=meanwhile)
    return pks or []


def _values(
    model: type[Any], rows: list[dict[str, Any]], pks: list[int] | None = None
) -> tuple[list[str], list[list[Any]]]:
    """The columns of ``model`` (its primary key first when ``pks`` are given) and each row's
    values in their order, for ``_copy``; a missing value takes the field's default."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    defaults = {f.attname: f.get_default() for f in fields}
    names = [f.attname for f in fields]
    columns = [f.column for f in fields]
    values = [[row[n] if n in row else defaults[n] for n in names] for row in rows]
    if pks:
        columns.insert(0, model._meta.pk.column)
        values = [[pk, *v] for pk, v in zip(pks, values, strict=True)]
    return columns, values


_column_types: dict[tuple[str, str], dict[str, int]] = {}


def _copy(
    cursor: Any, table: str, columns: list[str], rows: Any, *, meanwhile: Callable[[], Any] | None = None
) -> None:
    """COPY rows into a table in PostgreSQL's binary format: psycopg writes each value with
    its C dumper (about a quarter of the client time of the text format, and no text for the
    server to parse). The column types are asked once per process. ``meanwhile`` runs after
    the rows are sent and before the COPY's end waits for the server to have stored them."""
    key = (connection.settings_dict["NAME"], table)
    if key not in _column_types:
        cursor.execute(
            "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0",
            [table],
        )
        _column_types[key] = dict(cursor.fetchall())
    types = _column_types[key]
    quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
    with cursor.cursor.copy(f"COPY {table} ({quoted}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types([types[c] for c in columns])
        for row in rows:
            copy.write_row(row)
        if meanwhile is not None:
            meanwhile()


def _evidence_rows(project: Project, manifests: list[Manifest], call_pks: list[int]) -> list[dict[str, Any]]:
    return [
        dict(
            call_id=call_pk,
            project_id=project.pk,
            started_at=m.started_at,
            key=_clean(e.key),
            label=_clean(e.label),
            literal=_clean(e.literal),
            expected_item=_clean(e.expected_item),
            present=e.present,
            found_in=_clean(e.found_in),
            used=e.used,
        )
        for m, call_pk in zip(manifests, call_pks)
        for e in m.evidence
    ]


def _store_children(
    project: Project,
    manifests: list[Manifest],
    call_pks: list[int],
    evidence: list[dict[str, Any]] | None = None,
) -> None:
    """The calls' children but their items (written first, ``_store_rows``, or by ``_store``
    on SQLite): evidence (``_evidence_rows``, built here when not given), compactions with
    their invariants, context edits."""
    if evidence is None:
        evidence = _evidence_rows(project, manifests, call_pks)
    if evidence:
        _insert(Evidence, evidence)

    compactions: list[Compaction] = []
    invariants_of: list[list[Any]] = []
    for m, call_pk in zip(manifests, call_pks):
        for c in m.compactions:
            compactions.append(
                Compaction(
                    call_id=call_pk,
                    project=project,
                    started_at=m.started_at,
                    event_id=_clean(c.id),
                    strategy=_clean(c.strategy),
                    trigger=_clean(c.trigger),
                    tokens_before=c.tokens_before,
                    tokens_after=c.tokens_after,
                    kept_turns=c.kept_turns,
                    summary_item=_clean(c.summary_item),
                    failed_invariants=sum(1 for inv in c.invariants if not inv.ok),
                )
            )
            invariants_of.append(c.invariants)
    if compactions:
        Compaction.objects.bulk_create(compactions)
        Invariant.objects.bulk_create(
            [
                Invariant(
                    compaction_id=comp.pk,
                    started_at=comp.started_at,
                    name=inv.name,
                    ok=inv.ok,
                    detail=_clean(inv.detail),
                    lost=[_clean(x) for x in inv.lost],
                )
                for comp, invs in zip(compactions, invariants_of)
                for inv in invs
            ],
        )

    edits = [
        ContextEdit(
            call_id=call_pk,
            project=project,
            started_at=m.started_at,
            type=_clean(e.type),
            cleared_count=e.cleared_count,
            cleared_tokens=e.cleared_tokens,
            kept=e.kept,
            item_ids=[_clean(x) for x in e.item_ids],
        )
        for m, call_pk in zip(manifests, call_pks)
        for e in m.context_edits
    ]
    if edits:
        ContextEdit.objects.bulk_create(edits)


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
