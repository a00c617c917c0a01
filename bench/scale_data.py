"""Set-based data generator for the page and analysis benchmarks at 1M-100M+ item rows.

    from bench import scale_data
    report = scale_data.generate(connection, project_ids=[main, other, ...], items=100_000_000)

Everything is written by PostgreSQL itself: ``INSERT ... SELECT`` from ``generate_series``,
no row passes through Python. What it writes, for one main project and a few others sharing
the tables (so every query must filter by project, as in production):

- runs of 5-35 steps (mean 20) of four agents on two models, started evenly over ``days``
  (default 35) up to ``end``; a step every 20-120 s, and one run in ten idles 6-10 minutes
  between steps (past the 300 s prompt-cache TTL);
- calls with uuid call ids, a two-segment prefix whose system hash changes every two days,
  usage consistent with the cache outcome (cold start / prefix changed / TTL expired / hit),
  outcomes (60% verified), 4 required pieces of evidence (85% present);
- ``items`` item rows, 25%-175% of ``per_call`` per call (mean ``per_call``): the system,
  tools and task items first, then history / tool results / retrieval / memory / ... with
  realistic actions (60% kept, 8% dropped, the rest compressed, summarized, truncated,
  extracted, deduplicated or replaced by a reference), heavy-tailed token counts, a reason
  sentence, a 64-hex content hash stable across the steps of a run, source refs for
  retrieval, and a text snippet on ``text_share`` of the items (default 5%, 200-1,700 chars);
- per-call analysis rows as the analysis would write them: figures (tokens in context, hit
  rate, uncached tokens and cost at the price book's weights: manifests/figures.py's SQL
  definitions compiled by Django, no formula of their own), cache events (see
  :func:`event_cause` for which of the analysis's causes generated data can reach),
  attributions of every missing piece of evidence (and "not used" risks), compactions with
  invariants and their review figures, the prefix registry;
- rollups (hour and day) computed set-based from those rows, with the same sums as
  manifests/analysis/rollups.py; :func:`verify_rollups` recomputes a sample of buckets
  with that module and compares, and :func:`verify_figures` recomputes a sample of calls'
  figures and cache events with ctxkit.figures and manifests/analysis/cache.py.

Not written: the raw manifest (``calls.raw`` holds a small stub; the real ingest stores the
canonical JSON, TOAST-compressed, see docs/performance.md), context edits, regressions.

Adapting to a schema change (e.g. a time column on items, or partitioned tables): every
table's column list is one mapping in bench/scale_columns.py (``*_COLUMNS``: column -> SQL expression over the
generator's row sources, or a function returning one when it is compiled from the
server's definitions at generation time); add or rename a column there. Secondary indexes and foreign keys
of the big tables are dropped before the load and re-created afterwards from their own
definitions (``pg_get_indexdef`` / ``pg_get_constraintdef``), whatever they are.

The column SQL lives in bench/scale_columns.py; the rollups and the checks against the real code
(``verify_rollups``, ``verify_figures``) in bench/scale_rollups.py, re-exported here.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.scale_columns import (
    AGENTS,
    ATTRIBUTION_CAUSE,
    ATTRIBUTION_COLUMNS,
    CACHE_EVENT_COLUMNS,
    CALL_COLUMNS,
    COMPACTION_COLUMNS,
    COMPACTION_FIGURES_COLUMNS,
    DEFERRED_TABLES,
    EVIDENCE_COLUMNS,
    EVIDENCE_KEYS,
    FIGURES_COLUMNS,
    GRANTED,
    INVARIANT_COLUMNS,
    ITEM_ACTION,
    ITEM_COLUMNS,
    ITEM_COUNT,
    ITEM_HASH,
    ITEM_KIND,
    MODELS,
    REQUESTED,
    RUN_COLUMNS,
    TABLES,
    columns_sql,
    event_cause,
    h,
)
from bench.scale_rollups import item_sums, rollups, verify_figures, verify_rollups
from ctxkit.figures import ABSENT_ACTIONS


@dataclass
class Report:
    items: int = 0
    calls: int = 0
    runs: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)  # pg_total_relation_size per table (and its partitions)
    stopped_early: str = ""

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def _step(report: Report, name: str, log: Callable[[str], None]) -> Any:
    class Timer:
        def __enter__(self) -> None:
            self.start = time.perf_counter()

        def __exit__(self, *exc: object) -> None:
            report.seconds[name] = report.seconds.get(name, 0.0) + time.perf_counter() - self.start
            log(f"  {name}: {report.seconds[name]:.0f} s")

    return Timer()


def defer_indexes(cursor: Any, tables: Sequence[str]) -> list[str]:
    """Drop the secondary indexes and foreign keys of ``tables``; return the SQL that
    re-creates them (from the catalog's own definitions, whatever the schema is)."""
    restore: list[str] = []
    for table in tables:
        cursor.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass AND NOT i.indisprimary "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
            [table],
        )
        for name, definition in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{name}"')
            # A partitioned table's index reads "ON ONLY": re-create it on every partition.
            restore.append(definition.replace(" ON ONLY ", " ON "))
        cursor.execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass "
            "AND contype = 'f'",
            [table],
        )
        for name, definition in cursor.fetchall():
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
            restore.append(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
    return restore


def generate(
    cursor: Any,
    *,
    project_ids: Sequence[int],
    items: int,
    per_call: int = 100,
    days: int = 35,
    end: datetime | None = None,
    text_share: float = 0.05,
    chunk_items: int = 5_000_000,
    unlogged: str = "no",
    min_free_bytes: int = 25 * 2**30,
    disk_path: str = "/",
    workers: int = 1,
    max_load_seconds: float | None = None,
    log: Callable[[str], None] = print,
) -> Report:
    """Write about ``items`` item rows (and everything around them) for ``project_ids``
    (the first gets 60% of the runs, the others share the rest) with a PostgreSQL cursor
    in autocommit mode. The tables should be empty of generated rows: ids are not reused.

    ``unlogged``: "no" (every row WAL-logged, as ingest writes them), "then-logged" (the big
    tables are loaded UNLOGGED, then ``SET LOGGED``, which rewrites them through the WAL),
    or "keep" (they stay UNLOGGED: reads are the same, but a crash empties them; for
    measuring reads only, and the report must say so).

    Disk guard: after each chunk of items, the free space of ``disk_path`` (where PostgreSQL
    keeps its data) is projected to the end of the run (the rest of the items at the bytes
    per row seen so far, plus their indexes); when it would fall below ``min_free_bytes``,
    no more items are loaded, the calls left without items are removed, and the report
    says how many items were written (``report.stopped_early``). ``max_load_seconds`` stops
    the item load the same way after that long (a time budget on a shared machine).
    ``workers`` item chunks are inserted at once, each on its own connection."""
    end = end or datetime.now(UTC)
    start = end - timedelta(days=days)
    calls = max(1, items // per_call)
    runs = max(1, -(-calls // 20))
    report = Report()
    projects = list(project_ids)
    quarter = max(1, per_call // 4)
    span = max(1, per_call * 3 // 2 + 1)
    cursor.execute("SET maintenance_work_mem = '1GB'")
    cursor.execute("SET work_mem = '256MB'")
    cursor.execute("SET synchronous_commit = off")
    cursor.execute("SET jit = off")

    with _step(report, "runs", log):
        project_pick = (
            f"(ARRAY[{','.join(str(p) for p in projects)}])[CASE WHEN {h('r', 60, 10)} < 6 OR {len(projects)} = 1 "
            f"THEN 1 ELSE 2 + {h('r', 61, max(1, len(projects) - 1))} END]"
        )
        cursor.execute("DROP TABLE IF EXISTS scale_runs")
        # One row per run; its calls are its steps. Runs start evenly over the span,
        # interleaved; one in ten idles past the cache TTL between steps.
        cursor.execute(
            f"""
            CREATE UNLOGGED TABLE scale_runs AS
            SELECT r, project_id, steps, a, (ARRAY{list(AGENTS)})[a + 1] AS agent,
                   (ARRAY{list(MODELS)})[mod(a, 2) + 1] AS model,
                   CASE WHEN mod(a, 2) = 0 THEN 200000 ELSE 128000 END AS "window",
                   1800 + 600 * a AS prefix_tokens,
                   %(start)s::timestamptz + make_interval(secs => r::float8 * %(span)s / %(runs)s) AS t0,
                   CASE WHEN {h("r", 62, 10)} = 0 THEN 360 + {h("r", 63, 240)} ELSE 20 + {h("r", 64, 100)} END AS gap,
                   sum(steps) OVER (ORDER BY r) - steps AS first_g
            FROM (SELECT r, {project_pick} AS project_id, 5 + {h("r", 65, 31)} AS steps, {h("r", 66, 4)} AS a
                  FROM generate_series(0, %(runs)s - 1) r) q
            """,
            {"start": start, "span": (days * 86400) - 4 * 3600, "runs": runs},
        )
        cursor.execute("CREATE UNIQUE INDEX ON scale_runs (r)")
        cols, exprs = columns_sql(RUN_COLUMNS)
        cursor.execute(f"INSERT INTO manifests_run ({cols}) SELECT {exprs} FROM scale_runs sr ORDER BY sr.r")
        report.runs = runs

    with _step(report, "calls", log):
        from manifests.storage import partitions  # PostgreSQL: the span's daily partitions come first

        partitions.ensure_range(start, end + timedelta(days=1))
        cols, exprs = columns_sql(CALL_COLUMNS)
        exprs = exprs.replace("c.item_count", f"({ITEM_COUNT.format(quarter=quarter, span=span)})")
        cursor.execute(
            f"""
            INSERT INTO manifests_call ({cols})
            SELECT {exprs}
            FROM scale_runs sr
            JOIN manifests_run run ON run.project_id = sr.project_id AND run.run_id = 'run-' || md5('run' || sr.r)
            CROSS JOIN LATERAL generate_series(0, sr.steps - 1) s
            CROSS JOIN LATERAL (SELECT sr.first_g + s AS g) gg
            WHERE sr.first_g + s < %(calls)s
            ORDER BY g
            """,
            {"calls": calls},
        )
        # Each generated call's number g, for the per-item hashes.
        cursor.execute("DROP TABLE IF EXISTS scale_calls")
        cursor.execute(
            """
            CREATE UNLOGGED TABLE scale_calls AS
            SELECT c.id, c.project_id, c.run_id, c.step, c.item_count, c.started_at, sr.first_g + c.step AS g
            FROM manifests_call c JOIN manifests_run run ON run.id = c.run_id
            JOIN scale_runs sr ON 'run-' || md5('run' || sr.r) = run.run_id AND sr.project_id = run.project_id
            WHERE c.started_at >= %(start)s AND c.call_id = md5('call' || (sr.first_g + c.step))::uuid::text
            """,
            {"start": start},
        )
        cursor.execute("CREATE UNIQUE INDEX ON scale_calls (id)")
        # The idempotency registry (manifests.CallKey): ingest writes one row per call, and the
        # call view finds a call's day (its partition) there.
        cursor.execute(
            """
            INSERT INTO manifests_callkey (project_id, call_key, content_hash, call_id, started_at)
            SELECT c.project_id, c.call_id, c.content_hash, c.id, c.started_at
            FROM manifests_call c WHERE c.id IN (SELECT id FROM scale_calls) ORDER BY c.id
            """
        )
        cursor.execute("ANALYZE scale_calls")
        cursor.execute("SELECT count(*), min(id), max(id), coalesce(sum(item_count), 0) FROM scale_calls")
        report.calls, low, high, report.items = cursor.fetchone()

    with _step(report, "drop indexes", log):
        restore = defer_indexes(cursor, DEFERRED_TABLES)
        if unlogged != "no":  # empty now: switching costs nothing
            for table in DEFERRED_TABLES:
                cursor.execute(f"ALTER TABLE {table} SET UNLOGGED")

    try:
        text_test = f"{h(ITEM_HASH, 24, 10000)} < {int(text_share * 10000)}"
        with _step(report, "items", log):
            cols, exprs = columns_sql(ITEM_COLUMNS)
            exprs = exprs.replace("{text_share_test}", text_test)
            sql = f"""
                INSERT INTO manifests_item ({cols})
                SELECT {exprs}
                FROM scale_calls c
                CROSS JOIN LATERAL generate_series(0, c.item_count - 1) i
                CROSS JOIN LATERAL (SELECT {ITEM_KIND} AS kind, {ITEM_ACTION} AS action,
                                           {REQUESTED} AS requested) x0
                CROSS JOIN LATERAL (SELECT x0.kind, x0.action, x0.requested,
                                           {GRANTED.replace("x.", "x0.")} AS granted) x
                WHERE c.id >= %(first)s AND c.id < %(last)s
            """
            _load_items(
                cursor,
                report,
                sql,
                low,
                high,
                max(1, chunk_items // per_call),
                workers=workers,
                min_free=min_free_bytes,
                disk_path=disk_path,
                max_seconds=max_load_seconds,
                log=log,
            )

        with _step(report, "evidence", log):
            cols, exprs = columns_sql(EVIDENCE_COLUMNS)
            cursor.execute(
                f"INSERT INTO manifests_evidence ({cols}) SELECT {exprs} FROM scale_calls c "
                f"CROSS JOIN generate_series(0, {len(EVIDENCE_KEYS) - 1}) k ORDER BY c.id, k"
            )

        with _step(report, "item sums", log):
            item_sums(cursor, projects)

        with _step(report, "figures", log):
            cols, exprs = columns_sql(FIGURES_COLUMNS)
            cursor.execute(
                f"""
                INSERT INTO manifests_callfigures ({cols})
                SELECT {exprs} FROM manifests_call c
                JOIN (SELECT call_id, sum(tokens) AS tokens, sum(requested) AS requested,
                             sum(dedupe_requested) AS dedupe_requested,
                             sum(tokens) FILTER (WHERE kind = 'tools') AS tool_tokens,
                             sum(untrusted_tokens) AS untrusted_tokens
                      FROM scale_item_sums GROUP BY call_id) s ON s.call_id = c.id
                ORDER BY c.id
                """
            )

        with _step(report, "cache events", log):
            cols, exprs = columns_sql(CACHE_EVENT_COLUMNS)
            cursor.execute(
                f"""
                INSERT INTO manifests_cacheevent ({cols})
                SELECT {exprs}
                FROM scale_calls sc
                JOIN manifests_call c ON c.id = sc.id
                LEFT JOIN manifests_call p ON p.run_id = c.run_id AND p.step = c.step - 1
                CROSS JOIN LATERAL (SELECT {event_cause()} AS cause) x
                ORDER BY c.id
                """
            )

        with _step(report, "attributions", log):
            cols, exprs = columns_sql(ATTRIBUTION_COLUMNS)
            cursor.execute(
                f"""
                INSERT INTO manifests_attribution ({cols})
                SELECT {exprs}
                FROM (SELECT e.*, row_number() OVER (PARTITION BY e.call_id, {ATTRIBUTION_CAUSE} ORDER BY e.id) AS nth
                      FROM manifests_evidence e JOIN scale_calls sc ON sc.id = e.call_id
                      WHERE NOT e.present OR e.used IS FALSE) e
                JOIN manifests_call c ON c.id = e.call_id AND c.started_at = e.started_at
                ORDER BY e.id
                """
            )

        with _step(report, "compactions", log):
            cols, exprs = columns_sql(COMPACTION_COLUMNS)
            cursor.execute(
                f"INSERT INTO manifests_compaction ({cols}) SELECT {exprs} FROM scale_calls c "
                f"WHERE c.step > 0 AND {h('c.g', 53, 25)} = 0 ORDER BY c.id"
            )
            cols, exprs = columns_sql(INVARIANT_COLUMNS)
            cursor.execute(
                f"INSERT INTO manifests_invariant ({cols}) SELECT {exprs} FROM manifests_compaction m "
                "JOIN scale_calls c ON c.id = m.call_id CROSS JOIN generate_series(0, 1) k ORDER BY m.id, k"
            )
            cols, exprs = columns_sql(COMPACTION_FIGURES_COLUMNS)
            cursor.execute(
                f"INSERT INTO manifests_compactionfigures ({cols}) SELECT {exprs} FROM manifests_compaction m "
                "JOIN scale_calls c ON c.id = m.call_id ORDER BY m.id"
            )

        with _step(report, "prefix registry", log):
            cursor.execute(
                """
                INSERT INTO manifests_prefixentry (project_id, prefix_hash, first_seen, last_seen, calls, tokens,
                                                   segments)
                SELECT project_id, prefix_hash, min(started_at), max(started_at), count(*), max(prefix_tokens),
                       (array_agg(prefix_segments))[1]
                FROM manifests_call c WHERE c.id IN (SELECT id FROM scale_calls)
                GROUP BY project_id, prefix_hash
                ON CONFLICT (project_id, prefix_hash) DO UPDATE SET calls = manifests_prefixentry.calls + excluded.calls
                """
            )

        with _step(report, "rollups", log):
            rollups(cursor, project_ids=projects)
    finally:  # even after a failure: never leave the tables without their indexes and keys
        if unlogged == "then-logged":
            with _step(report, "set logged", log):
                for table in DEFERRED_TABLES:
                    cursor.execute(f"ALTER TABLE {table} SET LOGGED")
        with _step(report, "indexes and keys", log):
            # Indexes first, ``workers`` at once (CREATE INDEX locks allow it), then the keys.
            _parallel([q for q in restore if q.startswith("CREATE")], workers)
            for sql in restore:
                if not sql.startswith("CREATE"):
                    cursor.execute(sql)

    with _step(report, "vacuum analyze", log):
        for table in TABLES:
            cursor.execute(f"VACUUM (ANALYZE) {table}")
    cursor.execute("DROP TABLE IF EXISTS scale_runs, scale_calls, scale_item_sums")
    report.sizes = sizes(cursor)
    return report


def _load_items(
    cursor: Any,
    report: Report,
    sql: str,
    low: int,
    high: int,
    ids_per_chunk: int,
    *,
    workers: int,
    min_free: int,
    disk_path: str,
    max_seconds: float | None,
    log: Callable[[str], None],
) -> None:
    """Insert the items chunk by chunk (calls [first, first + ids_per_chunk)), ``workers`` at
    once; before each chunk, stop if the disk or the time budget would be exceeded."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from django.db import connections

    def chunk(first: int) -> int:
        try:
            with connections["default"].cursor() as own:  # this thread's own connection
                own.execute("SET jit = off")
                own.execute("SET synchronous_commit = off")
                own.execute(sql, {"first": first, "last": first + ids_per_chunk})
        finally:
            connections["default"].close()
        return first

    started = time.monotonic()
    done_calls = 0
    pending: set[Any] = set()
    stop_at = None
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for first in range(low, high + 1, ids_per_chunk):
            while len(pending) >= workers:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    f.result()
                    done_calls += min(ids_per_chunk, high + 1 - f.result())
                    log(f"    items of {done_calls:,}/{report.calls:,} calls, {time.monotonic() - started:.0f} s")
            reason = (
                _stop_reason(
                    cursor, done_calls, high + 1 - first, min_free, disk_path, time.monotonic() - started, max_seconds
                )
                if done_calls
                else ""
            )
            if reason:
                stop_at = first
                report.stopped_early = reason
                break
            pending.add(pool.submit(chunk, first))
        for f in pending:
            f.result()
    if stop_at is not None:
        cursor.execute("DELETE FROM manifests_call WHERE id >= %s AND id IN (SELECT id FROM scale_calls)", [stop_at])
        cursor.execute("DELETE FROM scale_calls WHERE id >= %s", [stop_at])
        cursor.execute("SELECT count(*), coalesce(sum(item_count), 0) FROM scale_calls")
        report.calls, report.items = cursor.fetchone()
        report.stopped_early = f"stopped at {report.items:,} items: {report.stopped_early}"
        log("  " + report.stopped_early)


def _parallel(statements: Sequence[str], workers: int) -> None:
    """Run independent statements on ``workers`` connections of their own."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    def run(sql: str) -> None:
        try:
            with connections["default"].cursor() as own:
                own.execute("SET maintenance_work_mem = '1GB'")
                own.execute(sql)
        finally:
            connections["default"].close()

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for future in [pool.submit(run, sql) for sql in statements]:
            future.result()


def _stop_reason(
    cursor: Any, done: int, left: int, min_free: int, disk_path: str, elapsed: float, max_seconds: float | None
) -> str:
    """Why loading the items of the ``left`` remaining calls must not start, or ''."""
    if max_seconds is not None and elapsed >= max_seconds:
        return f"the load's time budget ({max_seconds:.0f} s) was used"
    free = shutil.disk_usage(disk_path).free
    cursor.execute("SELECT pg_relation_size('manifests_item')")
    heap = cursor.fetchone()[0]
    # The rest of the item heap, then the indexes and the other tables: about 0.4x the heap
    # more (docs/performance.md, "Dashboard pages"). Chunks still running count as done: a small
    # underestimate, covered by the margin.
    needed = heap * left / max(1, done) + 0.4 * heap * (done + left) / max(1, done)
    if free - needed >= min_free:
        return ""
    return (
        f"{free / 2**30:.1f} GiB free, the rest would need about {needed / 2**30:.1f} GiB "
        f"and leave less than {min_free / 2**30:.0f} GiB"
    )


def sizes(cursor: Any) -> dict[str, int]:
    out = {}
    for table in TABLES:
        # A partitioned table's own size is 0: its partitions hold the rows (pg_partition_tree
        # lists a plain table as its only member).
        cursor.execute(
            "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree(%s::regclass)", [table]
        )
        out[table] = cursor.fetchone()[0]
    return out


def describe(report: Report) -> str:
    """The generation report as lines for the benchmarks' output."""
    total = sum(report.sizes.values())
    item_bytes = report.sizes.get("manifests_item", 0)
    lines = [report.stopped_early] if report.stopped_early else []
    lines += [
        f"generated {report.items:,} items, {report.calls:,} calls, {report.runs:,} runs "
        f"in {report.total_seconds:.0f} s ({report.items / max(report.total_seconds, 1e-9):,.0f} items/s)",
        "  " + ", ".join(f"{k} {v:.0f} s" for k, v in report.seconds.items()),
        f"  item table incl. indexes: {item_bytes / 2**30:.2f} GiB = {item_bytes / max(report.items, 1):.0f} "
        f"bytes per item row; all generated tables {total / 2**30:.2f} GiB = {total / max(report.items, 1):.0f} "
        "bytes per item row",
    ]
    lines += [f"    {t:<32} {b / 2**20:10,.0f} MiB" for t, b in sorted(report.sizes.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


__all__ = ["ABSENT_ACTIONS", "Report", "describe", "generate", "rollups", "sizes", "verify_figures", "verify_rollups"]
