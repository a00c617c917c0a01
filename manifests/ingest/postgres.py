"""Ingestion's PostgreSQL write path (``store`` calls it from ``_store`` and its retries): the batch's
advisory locks and registry lookup in one pipeline, the rows written by ``COPY`` while this process
builds the next ones, the runs and the registry in one pipeline, and the duplicate-key proofs run
during the foreign-key checks (``prove_while_checking``, raising ``Unproven`` to roll the batch
back). The rows themselves are built in ``rows``; see docs/performance.md for the why.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from ctxkit.manifest import Manifest
from manifests.ingest.dupkeys import no_duplicate_keys
from manifests.ingest.rows import (
    ITEM_COLUMNS,
    call_row,
    clean_text,
    copy_rows,
    digest,
    evidence_rows,
    iter_item_rows,
    runs_statement,
    store_children,
    values_statement,
)
from manifests.models import Call, CallKey, Evidence, Item, Project


class Unproven(Exception):
    """Manifests whose fast duplicate-key proof failed during the store (their indexes): the
    transaction is rolled back, they are judged the slow way, and the rest stored again."""

    def __init__(self, indexes: list[int]) -> None:
        super().__init__(indexes)
        self.indexes = indexes


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


def lock_and_look_up(project: Project, call_ids: list[str]) -> tuple[dict[str, str], list[int]]:
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
    keys = sorted({_lock_key(project, clean_text(c)) for c in call_ids})
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
            # project), scan every registry row of the project and filter, a cost that grows
            # with the project (docs/performance.md, "Ingest").
            lookup.execute(
                "SELECT u.k, c.content_hash FROM unnest(%s::text[]) AS u(k) CROSS JOIN LATERAL "
                f"(SELECT content_hash FROM {CallKey._meta.db_table} WHERE project_id = %s AND call_key = u.k "
                "LIMIT 1) AS c",
                [call_ids, project.pk],
            )
            ids.execute("SELECT nextval(%s::regclass) FROM generate_series(1, %s)", [sequence, len(call_ids)])
        return dict(lookup.fetchall()), sorted(i for (i,) in ids.fetchall())


def prove_while_checking(unproven: dict[int, bytes], *, wrote: bool) -> None:
    """The duplicate-key proofs ``ingest_body`` deferred, raising ``Unproven`` for those that
    fail. When the batch wrote rows, PostgreSQL first gets ``SET CONSTRAINTS ALL IMMEDIATE``
    in a pipeline: it runs the deferred foreign-key checks of every row now (the work COMMIT
    would do, one or more per row) while this process runs the proofs on the
    other core; the pipeline's end waits for both (docs/performance.md, "Ingest")."""
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
        raise Unproven(failed)


def store_rows(project: Project, to_store: list[tuple[Manifest, bytes]], call_pks: list[int]) -> list[int]:
    """PostgreSQL: the batch's rows, with the calls' ids reserved by ``lock_and_look_up``.

    The items first (nothing references them, and they reference no call by key): while the
    server stores them, the longest step of a batch, this
    process computes the content hashes and builds the calls' and the evidence's rows and the
    runs' statement, work that would otherwise keep the server waiting (docs/performance.md,
    "Ingest"). Then the runs and the registry (one pipeline, ``_upsert_runs_and_register``; a
    unique-key race raises there), the calls, the evidence and the rest of the children."""
    manifests = [m for m, _ in to_store]
    digests: list[str] = []
    made: dict[str, Any] = {}

    def meanwhile() -> None:
        digests.extend(digest(canonical) for _, canonical in to_store)
        now = timezone.now()
        # The run's id is filled in once the runs' upsert has answered.
        calls = [call_row(project, 0, m, c, d, now) for (m, c), d in zip(to_store, digests)]
        made["calls"] = values_statement(Call, calls, call_pks)
        made["evidence"] = values_statement(Evidence, evidence_rows(project, manifests, call_pks))
        made["runs"] = runs_statement(project, manifests)

    with connection.cursor() as cursor:
        # COPY is the physical baseline (far cheaper than bulk_create for item rows). The rows are
        # made as they are sent: the server, not this process, sets the pace.
        rows = iter_item_rows(project.pk, manifests, call_pks)
        copy_rows(cursor, Item._meta.db_table, list(ITEM_COLUMNS), rows, meanwhile=meanwhile)
        runs = _upsert_runs_and_register(project, manifests, digests, call_pks, made["runs"])
        columns, values = made["calls"]
        run_column = columns.index(Call._meta.get_field("run").column)
        for row, m in zip(values, manifests):
            row[run_column] = runs[clean_text(m.run_id)]
        copy_rows(cursor, Call._meta.db_table, columns, values)
        columns, values = made["evidence"]
        if values:
            copy_rows(cursor, Evidence._meta.db_table, columns, values)
    store_children(project, manifests, call_pks, [])
    return call_pks


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
    runs_sql: tuple[str, list[Any]],
) -> dict[str, int]:
    """PostgreSQL: the runs' upsert (``upsert_runs``) and the registry's rows (each with its
    call's reserved id) in one pipeline: one round trip instead of two statements and
    a COPY. A unique-key race raises here. Returns {run_id: pk}. (The evidence rows joined to
    these in the same pipeline cost more than their own COPY: docs/performance.md, "Ingest".)
    ``runs_sql`` is ``runs_statement``'s for these manifests."""
    run_sql, run_params = runs_sql
    keys = [clean_text(m.call_id) for m in manifests]
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
