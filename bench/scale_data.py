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
  :func:`_event_cause` for which of the analysis's causes generated data can reach),
  attributions of every missing piece of evidence (and "not used" risks), compactions with
  invariants and their review figures, the prefix registry;
- rollups (hour and day) computed set-based from those rows, with the same sums as
  manifests/analysis/rollups.py; :func:`verify_rollups` recomputes a sample of buckets
  with that module and compares, and :func:`verify_figures` recomputes a sample of calls'
  figures and cache events with ctxkit.figures and manifests/analysis/cache.py.

Not written: the raw manifest (``calls.raw`` holds a small stub; the real ingest stores the
canonical JSON, TOAST-compressed, see docs/performance.md), context edits, regressions.

Adapting to a schema change (e.g. a time column on items, or partitioned tables): every
table's column list is one mapping below (``*_COLUMNS``: column -> SQL expression over the
generator's row sources, or a function returning one when it is compiled from the
server's definitions at generation time); add or rename a column there. Secondary indexes and foreign keys
of the big tables are dropped before the load and re-created afterwards from their own
definitions (``pg_get_indexdef`` / ``pg_get_constraintdef``), whatever they are.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ctxkit.figures import ABSENT_ACTIONS, BUDGET, COMPACTION, NEVER_CANDIDATE, NOT_USED, TRUNCATED

AGENTS = ("researcher", "coder", "refund-analyst", "planner")
MODELS = ("claude-sonnet-4-5", "gpt-5-mini")  # agent n uses MODELS[n % 2]
EVIDENCE_KEYS = ("user_constraint", "ticket_id", "refund_policy", "error_log")
CACHE_TTL = 300  # what the generated agents record (Call.cache_ttl_seconds); the analysis uses it first
# The big tables whose secondary indexes and foreign keys are built after the load.
DEFERRED_TABLES = (
    "manifests_item",
    "manifests_evidence",
    "manifests_callfigures",
    "manifests_attribution",
    "manifests_cacheevent",
    "manifests_compaction",
    "manifests_invariant",
    "manifests_compactionfigures",
)
# Every table the generator writes, for the size report.
TABLES = (
    "manifests_run",
    "manifests_call",
    "manifests_callkey",
    *DEFERRED_TABLES,
    "manifests_prefixentry",
    "manifests_rollup",
)


def h(expr: str, salt: int, modulo: int) -> str:
    """A deterministic pseudo-random integer in [0, modulo) from an integer SQL expression."""
    return f"mod(hashint8(({expr})::int8 * 16777619 + {salt}) & 2147483647, {modulo})"


# --------------------------------------------------------------------------- #
# Row sources. Calls come from ``scale_runs`` (one row per run: r, project_id, steps,
# agent index a, first time t0, gap seconds) joined to generate_series(0, steps - 1) s.
# Per-call expressions use g (the call's global number), r, s, a, and the call's time t.

CALL_TIME = "(sr.t0 + make_interval(secs => s * sr.gap))"
PREV_TIME = "(sr.t0 + make_interval(secs => (s - 1) * sr.gap))"
PREFIX_VERSION = "floor(extract(epoch FROM {t}) / 172800)::int8"
# A run's calls carry about the same items, one more at each step (a new turn of history).
ITEM_COUNT = "greatest(4, {quarter} + " + h("sr.r", 1, "{span}") + " + s - sr.steps / 2)"


def _prefix_hash(t: str) -> str:
    v = PREFIX_VERSION.format(t=t)
    return f"md5(sr.a || ':' || {v}) || md5('tools:' || sr.a)"


def _evidence_present(g: str, k: int | str) -> str:
    return f"({h(f'{g} * 8 + {k}', 2, 100)} < 85)"


# Does call (r, s) read its prefix from the cache? Not the first step of its run, the same
# prefix as the step before, within the TTL. The usage columns follow this; the cache events
# are then classified from the stored calls (:func:`_event_cause`), and verify_figures checks
# them against the analysis's own classify().
WARM = (
    f"(s > 0 AND {PREFIX_VERSION.format(t=CALL_TIME)} = {PREFIX_VERSION.format(t=PREV_TIME)} "
    f"AND sr.gap <= {CACHE_TTL})"
)

RUN_COLUMNS: dict[str, str] = {
    "project_id": "sr.project_id",
    "run_id": "'run-' || md5('run' || sr.r)",
    "agent": "sr.agent",
    "model": "sr.model",
    "first_seen": "sr.t0",
    "last_seen": "sr.t0 + make_interval(secs => (sr.steps - 1) * sr.gap)",
}

CALL_COLUMNS: dict[str, str] = {
    "project_id": "sr.project_id",
    "run_id": "run.id",
    "call_id": "md5('call' || g)::uuid::text",
    "step": "s",
    "agent": "sr.agent",
    "model": "sr.model",
    "provider": "CASE WHEN mod(sr.a, 2) = 0 THEN 'anthropic' ELSE 'openai' END",
    "started_at": CALL_TIME,
    "ended_at": f"{CALL_TIME} + make_interval(secs => 2 + {h('g', 3, 20)})",
    "builder_name": "'ctxkit'",
    "builder_version": "'0.4.0'",
    "window": "sr.window",
    "output_reserve": "8000",
    "safety_margin": "1000",
    "input_cap": "sr.window - 9000",
    "prefix_hash": _prefix_hash(CALL_TIME),
    "prefix_tokens": "sr.prefix_tokens",
    "prefix_segments": (
        "jsonb_build_array("
        f"jsonb_build_object('name', 'system', 'hash', md5(sr.a || ':' || {PREFIX_VERSION.format(t=CALL_TIME)}), "
        "'tokens', sr.prefix_tokens - 1500), "
        "jsonb_build_object('name', 'tools', 'hash', md5('tools:' || sr.a), 'tokens', 1500))"
    ),
    "cache_ttl_seconds": str(CACHE_TTL),
    "input_tokens": "sr.prefix_tokens + c.item_count * (300 + " + h("g", 4, 400) + ")",
    "cache_read_tokens": f"CASE WHEN {WARM} THEN sr.prefix_tokens ELSE 0 END",
    "cache_write_tokens": f"CASE WHEN {WARM} THEN 0 ELSE sr.prefix_tokens END",
    "output_tokens": "200 + " + h("g", 5, 1500),
    "status": f"CASE WHEN {h('g', 6, 50)} = 0 THEN 'error' ELSE 'ok' END",
    "finish_reason": "'end_turn'",
    "verified": f"(ARRAY['yes','yes','yes','yes','yes','yes','no','no','unknown','unknown'])[{h('g', 7, 10)} + 1]",
    "item_count": "c.item_count",
    "evidence_count": str(len(EVIDENCE_KEYS)),
    "evidence_missing": " + ".join(f"(NOT {_evidence_present('g', k)})::int" for k in range(len(EVIDENCE_KEYS))),
    "warnings": "'[]'::jsonb",
    "content_hash": "md5('call' || g) || md5('body' || g)",
    "raw": "'{\"call_id\":\"' || md5('call' || g)::uuid::text || '\"}'",
    "received_at": f"{CALL_TIME} + interval '3 seconds'",
    "analyzed_at": f"{CALL_TIME} + interval '5 seconds'",
    "analysis_error": "''",
}

# Items: calls c (with g = c.g from scale_calls) x generate_series(0, c.item_count - 1) i.
# An item keeps its kind, size, priority and text through the steps of its run (hashed on
# the run and the ordinal); one in ten gets another action at each step (hashed on the call).
_IH = "c.run_id * 4096 + i"
_IH_CALL = "c.g * 4096 + i"
ITEM_KIND = (
    "CASE WHEN i = 0 THEN 'system' WHEN i = 1 THEN 'tools' WHEN i = 2 THEN 'task' ELSE "
    "(ARRAY['history','history','history','history','history','history','history','tool_result','tool_result',"
    "'tool_result','tool_result','tool_result','retrieval','retrieval','retrieval','retrieval','memory','memory',"
    f"'summary','example'])[{h(_IH, 11, 20)} + 1] END"
)
_ACTIONS = (
    ["keep"] * 60
    + ["compress"] * 8
    + ["summarize"] * 6
    + ["truncate"] * 6
    + ["extract"] * 4
    + ["drop"] * 8
    + ["dedupe"] * 4
    + ["ref"] * 4
)  # percent of the items after the first three
ITEM_ACTION = (
    "CASE WHEN i < 3 THEN 'keep' ELSE (ARRAY["
    + ",".join(f"'{a}'" for a in _ACTIONS)
    + "])["
    + f"CASE WHEN {h(_IH_CALL, 25, 10)} = 0 THEN {h(_IH_CALL, 12, 100)} ELSE {h(_IH, 12, 100)} END"
    + " + 1] END"
)
# Heavy-tailed: most items are a few hundred tokens, a few are several thousand.
REQUESTED = (
    f"CASE WHEN i = 0 THEN 900 WHEN i = 1 THEN 1500 WHEN i = 2 THEN 300 + {h(_IH, 13, 400)} "
    f"ELSE 20 + {h(_IH, 14, 1000)} * {h(_IH, 15, 1000)} / 250 END"
)
GRANTED = (
    "CASE x.action WHEN 'keep' THEN x.requested WHEN 'drop' THEN 0 WHEN 'dedupe' THEN 0 "
    "WHEN 'summarize' THEN greatest(1, x.requested / 5) WHEN 'ref' THEN 20 "
    f"ELSE greatest(1, x.requested * (30 + {h(_IH, 16, 50)}) / 100) END"
)

ITEM_COLUMNS: dict[str, str] = {
    "call_id": "c.id",
    "project_id": "c.project_id",
    "ordinal": "i",
    "item_id": "'item-' || i",
    "kind": "x.kind",
    "action": "x.action",
    "trust": f"CASE WHEN x.kind IN ('tool_result', 'retrieval') AND {h(_IH, 17, 10)} < 3 "
    "THEN 'untrusted' ELSE 'trusted' END",
    "priority": f"CASE WHEN i < 3 THEN 100 ELSE {h(_IH, 18, 100)} END",
    "pinned": "i < 3",
    "zone": "CASE WHEN x.granted = 0 THEN NULL WHEN i < 3 THEN 'head' "
    "WHEN i >= c.item_count - 5 THEN 'tail' ELSE 'middle' END",
    "position": "CASE WHEN x.granted = 0 THEN NULL ELSE i END",
    "requested_tokens": "x.requested",
    "granted_tokens": "x.granted",
    "used_tokens": "x.granted",
    "reason": "x.action || ': ' || x.granted || ' of ' || x.requested || ' tokens granted at priority weight '"
    f" || {h(_IH, 19, 100)} || ' (' || x.kind || ' policy, floor ' || {h(_IH, 20, 64)} || ')'",
    "source_ref": f"CASE WHEN x.kind = 'retrieval' THEN 'kb://docs/' || {h(_IH, 21, 100000)} ELSE NULL END",
    "source_version": "NULL",
    "content_hash": "md5(c.run_id || ':' || i || ':' || "
    f"CASE WHEN {h(_IH, 22, 20)} = 0 THEN c.step ELSE 0 END) || md5(i || ':' || c.run_id)",
    "group": "NULL",
    "text": "CASE WHEN {text_share_test} THEN repeat(md5(c.g || ':' || i) || ' ', "
    f"6 + {h(_IH, 23, 50)}) ELSE NULL END",
    "started_at": "c.started_at",  # the call's time: the partition key (PostgreSQL)
}

EVIDENCE_COLUMNS: dict[str, str] = {
    "call_id": "c.id",
    "project_id": "c.project_id",
    "started_at": "c.started_at",
    "key": f"(ARRAY[{','.join(repr(k) for k in EVIDENCE_KEYS)}])[k + 1]",
    "label": "'required: ' || (ARRAY[" + ",".join(repr(k) for k in EVIDENCE_KEYS) + "])[k + 1]",
    "literal": "NULL",
    "expected_item": "CASE WHEN k = 3 THEN NULL ELSE 'item-' || (3 + "
    + h("c.g * 8 + k", 30, "greatest(1, c.item_count - 3)")
    + ") END",
    "present": _evidence_present("c.g", "k"),
    "found_in": f"CASE WHEN {_evidence_present('c.g', 'k')} AND k < 3 THEN 'item-' || (3 + "
    + h("c.g * 8 + k", 30, "greatest(1, c.item_count - 3)")
    + ") ELSE NULL END",
    "used": f"CASE WHEN {_evidence_present('c.g', 'k')} THEN {h('c.g * 8 + k', 31, 10)} < 8 ELSE NULL END",
}



def _call_figure(alias: str, build: Callable[[Any], Any]) -> Callable[[], str]:
    """A figure of manifests/figures.py over the call row ``alias``, compiled to SQL when the
    generator runs (it needs Django's connection): ``build`` gets the module."""

    def compiled() -> str:
        from manifests import figures
        from manifests.models import Call

        return figures.as_sql(build(figures), Call, alias)

    return compiled


def _hit_rate(alias: str) -> Callable[[], str]:
    def build(figures: Any) -> Any:
        from django.db.models import F

        return figures.hit_rate(F("cache_read_tokens"), F("input_tokens"))

    return _call_figure(alias, build)


def _cost() -> str:
    """The analysis's cost (manifests/analysis/figures.py): ctxkit.figures.cost_units at the
    weights of the call's model in the price book (per 1k tokens / 1000), compiled from
    manifests/figures.py once per generated model."""
    from manifests import figures
    from manifests.analysis.prices import PriceBook
    from manifests.models import Call

    book = PriceBook.load()
    whens = " ".join(
        f"WHEN '{m}' THEN {figures.as_sql(figures.cost_units(weights=book.for_model(m).weights), Call, 'c')}"
        for m in MODELS
    )
    return f"CASE c.model {whens} END"


# Figures: per call, from the per-call item sums in scale_item_sums (s) and the call (c).
_OCCUPIED = "coalesce(nullif(c.input_tokens, 0), s.tokens)"
FIGURES_COLUMNS: dict[str, str | Callable[[], str]] = {
    "call_id": "c.id",
    "project_id": "c.project_id",
    "started_at": "c.started_at",
    "context_tokens": "s.tokens",
    "uncached_input_tokens": _call_figure("c", lambda f: f.uncached_tokens()),
    "cache_hit_ratio": _hit_rate("c"),
    "window_utilization": f"{_OCCUPIED}::float8 / greatest(1, c.window)",
    "effective_limit": "greatest(1, (c.window * 0.25)::int8)",
    "effective_share": f"{_OCCUPIED}::float8 / greatest(1, (c.window * 0.25)::int8)",
    "reserve_share": "c.output_reserve::float8 / greatest(1, c.window)",
    "headroom_tokens": f"c.input_cap - {_OCCUPIED}",
    "duplicate_ratio": "CASE WHEN s.requested > 0 THEN s.dedupe_requested::float8 / s.requested ELSE 0 END",
    "duplicate_context_tokens": "0",
    "evidence_coverage": f"(c.evidence_count - c.evidence_missing)::float8 / {len(EVIDENCE_KEYS)}",
    "tool_tokens": "s.tool_tokens",
    "tool_share": "CASE WHEN s.tokens > 0 THEN s.tool_tokens::float8 / s.tokens ELSE 0 END",
    "untrusted_tokens": "s.untrusted_tokens",
    "cost": _cost,
    "evidence_positions": "'{}'::jsonb",
}

ATTRIBUTION_COLUMNS: dict[str, str] = {
    "project_id": "e.project_id",
    "call_id": "e.call_id",
    "evidence_id": "e.id",
    "evidence_key": "e.key",
    "cause": f"CASE WHEN e.present THEN '{NOT_USED}' WHEN e.expected_item IS NULL THEN '{NEVER_CANDIDATE}' "
    f"WHEN {h('e.id', 40, 10)} < 6 THEN '{BUDGET}' WHEN {h('e.id', 40, 10)} < 9 THEN '{TRUNCATED}' "
    f"ELSE '{COMPACTION}' END",
    "fix": "CASE WHEN e.present THEN 'Place it nearer the end of the context or mark it required' "
    "ELSE 'Pin the item or raise its priority above the budget cut' END",
    "item_id": "coalesce(e.expected_item, '')",
    "action": "CASE WHEN e.present THEN 'keep' ELSE 'drop' END",
    "reason": "CASE WHEN e.present THEN 'kept whole' ELSE 'drop: 0 tokens granted under budget pressure' END",
    "is_risk": "e.present",
    "lost_at_id": "NULL",
    "started_at": "c.started_at",
}

# The gap the analysis measures: from the previous call's end (when the cache was last used).
_GAP = "extract(epoch FROM c.started_at - coalesce(p.ended_at, p.started_at))"


def _event_cause() -> str:
    """The cause of call c's cache outcome, given the previous call p of its run (NULL for
    the first): the branches of manifests/analysis/cache.py's classify() that generated data
    can reach, in classify's order, with its names (CacheEvent's constants).

    classify has no SQL form (it runs in Python per analysed chunk), so this is the subset
    that generated calls need, not a second definition; verify_figures runs classify on a
    sample and compares. Left out, because no generated call can reach them: "below the
    minimum" (every prefix is 1,800+ tokens, above the default 1,024), a model change
    within a run (a run has one model), "first call warm from another run" (a first step
    never reads the cache), and the price book's TTL (every call records its TTL)."""
    from manifests.models import CacheEvent as E

    return (
        f"CASE WHEN p.id IS NULL THEN '{E.COLD_START}' "
        f"WHEN c.prefix_hash <> '' AND p.prefix_hash <> '' AND c.prefix_hash <> p.prefix_hash "
        f"THEN '{E.PREFIX_CHANGED}' "
        f"WHEN c.cache_read_tokens > 0 THEN '{E.HIT}' "
        f"WHEN {_GAP} > coalesce(nullif(p.cache_ttl_seconds, 0), nullif(c.cache_ttl_seconds, 0)) "
        f"THEN '{E.TTL_EXPIRED}' "
        f"ELSE '{E.COLD_START}' END"
    )


def _event_texts() -> str:
    from manifests.models import CacheEvent as E

    return (
        f"CASE x.cause WHEN '{E.HIT}' THEN 'same prefix as the previous call, read from the cache' "
        f"WHEN '{E.COLD_START}' THEN 'first call of the run: nothing cached yet' "
        f"WHEN '{E.TTL_EXPIRED}' THEN 'longer than the cache TTL since the previous call' "
        "ELSE 'segment ''system'' changed; the cache is lost from there on' END"
    )


def _changed_segment() -> str:
    from manifests.models import CacheEvent as E

    # Only the system segment's hash changes (every two days): classify's first changed segment.
    return f"CASE WHEN x.cause = '{E.PREFIX_CHANGED}' THEN 'system' ELSE '' END"


CACHE_EVENT_COLUMNS: dict[str, str | Callable[[], str]] = {
    "project_id": "c.project_id",
    "call_id": "c.id",
    "previous_call_id": "p.id",
    "cause": "x.cause",
    "changed_segment": _changed_segment,
    "gap_seconds": _GAP,
    "hit_ratio": _hit_rate("c"),
    "previous_hit_ratio": _hit_rate("p"),
    "prefix_hash": "c.prefix_hash",
    "previous_prefix_hash": "coalesce(p.prefix_hash, '')",
    "detail": _event_texts,
    "started_at": "c.started_at",
}

COMPACTION_COLUMNS: dict[str, str] = {
    "call_id": "c.id",
    "project_id": "c.project_id",
    "started_at": "c.started_at",
    "event_id": "'cmp-' || c.g",
    "strategy": "CASE WHEN mod(c.g, 2) = 0 THEN 'summary' ELSE 'clear_tool_results' END",
    "trigger": "'budget'",
    "tokens_before": "60000 + " + h("c.g", 50, 40000),
    "tokens_after": "8000 + " + h("c.g", 51, 12000),
    "kept_turns": "4",
    "summary_item": "'summary-3'",
    "failed_invariants": f"({h('c.g', 52, 7)} = 0)::int",
}

INVARIANT_COLUMNS: dict[str, str] = {
    "compaction_id": "m.id",
    "started_at": "m.started_at",
    "name": "(ARRAY['user_constraints','required_evidence'])[k + 1]",
    "ok": "NOT (k = 0 AND m.failed_invariants > 0)",
    "detail": "''",
    "lost": "CASE WHEN k = 0 AND m.failed_invariants > 0 THEN '[\"only the test environment\"]'::jsonb "
    "ELSE '[]'::jsonb END",
}

COMPACTION_FIGURES_COLUMNS: dict[str, str] = {
    "compaction_id": "m.id",
    "project_id": "m.project_id",
    "call_id": "m.call_id",
    "started_at": "c.started_at",
    "ratio_r": "m.tokens_after::float8 / m.tokens_before",
    "distortion_d": "m.failed_invariants::float8 / 2",
    "checked": "2",
    "failed": "m.failed_invariants > 0",
    "lost_fields": "CASE WHEN m.failed_invariants > 0 THEN '[\"only the test environment\"]'::jsonb "
    "ELSE '[]'::jsonb END",
    "failed_names": "CASE WHEN m.failed_invariants > 0 THEN '[\"user_constraints\"]'::jsonb ELSE '[]'::jsonb END",
}


def _cols(columns: Mapping[str, str | Callable[[], str]]) -> tuple[str, str]:
    return ", ".join(f'"{c}"' for c in columns), ", ".join(v() if callable(v) else v for v in columns.values())


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
        cols, exprs = _cols(RUN_COLUMNS)
        cursor.execute(f"INSERT INTO manifests_run ({cols}) SELECT {exprs} FROM scale_runs sr ORDER BY sr.r")
        report.runs = runs

    with _step(report, "calls", log):
        from manifests import partitions  # PostgreSQL: the span's daily partitions come first

        partitions.ensure_range(start, end + timedelta(days=1))
        cols, exprs = _cols(CALL_COLUMNS)
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
        text_test = f"{h(_IH, 24, 10000)} < {int(text_share * 10000)}"
        with _step(report, "items", log):
            cols, exprs = _cols(ITEM_COLUMNS)
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
            cols, exprs = _cols(EVIDENCE_COLUMNS)
            cursor.execute(
                f"INSERT INTO manifests_evidence ({cols}) SELECT {exprs} FROM scale_calls c "
                f"CROSS JOIN generate_series(0, {len(EVIDENCE_KEYS) - 1}) k ORDER BY c.id, k"
            )

        with _step(report, "item sums", log):
            _item_sums(cursor, projects)

        with _step(report, "figures", log):
            cols, exprs = _cols(FIGURES_COLUMNS)
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
            cols, exprs = _cols(CACHE_EVENT_COLUMNS)
            cursor.execute(
                f"""
                INSERT INTO manifests_cacheevent ({cols})
                SELECT {exprs}
                FROM scale_calls sc
                JOIN manifests_call c ON c.id = sc.id
                LEFT JOIN manifests_call p ON p.run_id = c.run_id AND p.step = c.step - 1
                CROSS JOIN LATERAL (SELECT {_event_cause()} AS cause) x
                ORDER BY c.id
                """
            )

        with _step(report, "attributions", log):
            cols, exprs = _cols(ATTRIBUTION_COLUMNS)
            cursor.execute(
                f"""
                INSERT INTO manifests_attribution ({cols})
                SELECT {exprs} FROM manifests_evidence e JOIN scale_calls c ON c.id = e.call_id
                WHERE NOT e.present OR e.used IS FALSE
                ORDER BY e.id
                """
            )

        with _step(report, "compactions", log):
            cols, exprs = _cols(COMPACTION_COLUMNS)
            cursor.execute(
                f"INSERT INTO manifests_compaction ({cols}) SELECT {exprs} FROM scale_calls c "
                f"WHERE c.step > 0 AND {h('c.g', 53, 25)} = 0 ORDER BY c.id"
            )
            cols, exprs = _cols(INVARIANT_COLUMNS)
            cursor.execute(
                f"INSERT INTO manifests_invariant ({cols}) SELECT {exprs} FROM manifests_compaction m "
                "JOIN scale_calls c ON c.id = m.call_id CROSS JOIN generate_series(0, 1) k ORDER BY m.id, k"
            )
            cols, exprs = _cols(COMPACTION_FIGURES_COLUMNS)
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
    # The rest of the item heap, then the indexes and the other tables: 1.4x the heap in
    # the 10M run (docs/performance.md). Chunks still running count as done: a small
    # underestimate, covered by the margin.
    needed = heap * left / max(1, done) + 0.4 * heap * (done + left) / max(1, done)
    if free - needed >= min_free:
        return ""
    return (
        f"{free / 2**30:.1f} GiB free, the rest would need about {needed / 2**30:.1f} GiB "
        f"and leave less than {min_free / 2**30:.0f} GiB"
    )


def _item_sums(cursor: Any, project_ids: Sequence[int]) -> None:
    """Per call and kind: tokens in context (manifests/figures.py's one SQL definition,
    compiled by Django), requested tokens, deduplicated requests, untrusted tokens."""
    from django.db.models import Q, Sum

    from manifests import figures
    from manifests.models import Item

    query = (
        Item.objects.filter(project_id__in=project_ids)
        .values("call_id", "kind")
        .annotate(
            tokens=Sum(figures.context_tokens()),
            requested=Sum("requested_tokens"),
            dedupe_requested=Sum("requested_tokens", filter=Q(action="dedupe"), default=0),
            untrusted_tokens=Sum(figures.context_tokens(), filter=Q(trust="untrusted"), default=0),
        )
        .order_by()
    )
    sql, params = query.query.sql_with_params()
    cursor.execute("DROP TABLE IF EXISTS scale_item_sums")
    cursor.execute(f"CREATE UNLOGGED TABLE scale_item_sums AS {sql}", params)
    cursor.execute("CREATE INDEX ON scale_item_sums (call_id)")
    cursor.execute("ANALYZE scale_item_sums")


def rollups(cursor: Any, *, project_ids: Sequence[int]) -> None:
    """Hour and day rollups of the projects, set-based, with manifests/analysis/rollups.py's
    sums: an hour from its analysed calls, a day as the sum of its hours."""
    ids = list(project_ids)
    cursor.execute("DELETE FROM manifests_rollup WHERE project_id = ANY(%s)", [ids])
    k = "p, hr, agent, model"
    cursor.execute(
        f"""
        WITH calls AS (
            SELECT c.id, c.project_id AS p, c.agent, c.model,
                   date_trunc('hour', c.started_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hr
            FROM manifests_call c WHERE c.project_id = ANY(%(ids)s) AND c.analyzed_at IS NOT NULL
        ),
        kinds AS (
            SELECT {k}, jsonb_object_agg(kind, tokens ORDER BY kind) AS m FROM (
                SELECT {k}, s.kind, sum(s.tokens) AS tokens FROM scale_item_sums s JOIN calls ON calls.id = s.call_id
                GROUP BY {k}, s.kind HAVING sum(s.tokens) <> 0) t GROUP BY {k}
        ),
        attributions AS (
            SELECT {k}, jsonb_object_agg(cause, n ORDER BY cause) AS m FROM (
                SELECT {k}, a.cause, count(*) AS n FROM manifests_attribution a JOIN calls ON calls.id = a.call_id
                GROUP BY {k}, a.cause) t GROUP BY {k}
        ),
        causes AS (
            SELECT {k}, jsonb_object_agg(cause, n ORDER BY cause) AS m,
                   coalesce(sum(n) FILTER (WHERE cause = 'prefix_changed'), 0) AS prefix_changes FROM (
                SELECT {k}, e.cause, count(*) AS n FROM manifests_cacheevent e JOIN calls ON calls.id = e.call_id
                GROUP BY {k}, e.cause) t GROUP BY {k}
        ),
        compactions AS (
            SELECT {k}, count(*) AS n, sum(m.failed_invariants) AS failures
            FROM manifests_compaction m JOIN calls ON calls.id = m.call_id GROUP BY {k}
        ),
        totals AS (
            SELECT p, hr, calls.agent, calls.model, count(*) AS calls, sum(c.item_count) AS items,
                   sum(c.input_tokens) AS input_tokens, sum(c.cache_read_tokens) AS cache_read_tokens,
                   sum(c.cache_write_tokens) AS cache_write_tokens, sum(c.output_tokens) AS output_tokens,
                   coalesce(sum(f.uncached_input_tokens), 0) AS uncached,
                   round(coalesce(sum(f.cost), 0)::numeric, 6)::float8 AS cost,
                   count(*) FILTER (WHERE c.verified = 'yes') AS verified_successes,
                   sum(c.evidence_count) AS evidence_total, sum(c.evidence_count - c.evidence_missing) AS present
            FROM calls JOIN manifests_call c ON c.id = calls.id
            LEFT JOIN manifests_callfigures f ON f.call_id = c.id GROUP BY p, hr, calls.agent, calls.model
        )
        INSERT INTO manifests_rollup (project_id, bucket, start, agent, model, calls, items, input_tokens,
            cache_read_tokens, cache_write_tokens, output_tokens, uncached_input_tokens, cost, verified_successes,
            evidence_total, evidence_present, compactions, invariant_failures, attributions, cache_causes,
            tokens_by_kind, prefix_changes, computed_at)
        SELECT t.p, 'hour', t.hr, t.agent, t.model, t.calls, t.items, t.input_tokens, t.cache_read_tokens,
               t.cache_write_tokens, t.output_tokens, t.uncached, t.cost, t.verified_successes, t.evidence_total,
               t.present, coalesce(cm.n, 0), coalesce(cm.failures, 0), coalesce(a.m, '{{}}'), coalesce(cc.m, '{{}}'),
               coalesce(kd.m, '{{}}'), coalesce(cc.prefix_changes, 0), now()
        FROM totals t LEFT JOIN kinds kd USING ({k}) LEFT JOIN attributions a USING ({k})
        LEFT JOIN causes cc USING ({k}) LEFT JOIN compactions cm USING ({k})
        """,
        {"ids": ids},
    )
    day = "date_trunc('day', r.start AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
    cursor.execute(
        f"""
        WITH hours AS (SELECT r.*, {day} AS d FROM manifests_rollup r
                       WHERE r.project_id = ANY(%(ids)s) AND r.bucket = 'hour'),
        maps AS (
            SELECT project_id, d, agent, model, name, jsonb_object_agg(key, n ORDER BY key) AS m FROM (
                SELECT project_id, d, agent, model, name, key, sum(value::int8) AS n
                FROM hours, LATERAL (VALUES ('attributions', attributions), ('cache_causes', cache_causes),
                                            ('tokens_by_kind', tokens_by_kind)) v(name, map),
                     LATERAL jsonb_each_text(map) e
                GROUP BY 1, 2, 3, 4, 5, 6 HAVING sum(value::int8) <> 0) t
            GROUP BY 1, 2, 3, 4, 5
        )
        INSERT INTO manifests_rollup (project_id, bucket, start, agent, model, calls, items, input_tokens,
            cache_read_tokens, cache_write_tokens, output_tokens, uncached_input_tokens, cost, verified_successes,
            evidence_total, evidence_present, compactions, invariant_failures, attributions, cache_causes,
            tokens_by_kind, prefix_changes, computed_at)
        SELECT h.project_id, 'day', h.d, h.agent, h.model, sum(calls), sum(items), sum(input_tokens),
               sum(cache_read_tokens), sum(cache_write_tokens), sum(output_tokens), sum(uncached_input_tokens),
               round(sum(cost)::numeric, 6)::float8, sum(verified_successes), sum(evidence_total),
               sum(evidence_present), sum(compactions), sum(invariant_failures),
               coalesce((SELECT m FROM maps WHERE (maps.project_id, maps.d, maps.agent, maps.model, maps.name)
                         = (h.project_id, h.d, h.agent, h.model, 'attributions')), '{{}}'),
               coalesce((SELECT m FROM maps WHERE (maps.project_id, maps.d, maps.agent, maps.model, maps.name)
                         = (h.project_id, h.d, h.agent, h.model, 'cache_causes')), '{{}}'),
               coalesce((SELECT m FROM maps WHERE (maps.project_id, maps.d, maps.agent, maps.model, maps.name)
                         = (h.project_id, h.d, h.agent, h.model, 'tokens_by_kind')), '{{}}'),
               sum(prefix_changes), now()
        FROM hours h GROUP BY h.project_id, h.d, h.agent, h.model
        """,
        {"ids": ids},
    )


def verify_rollups(project_id: int, sample: int = 12) -> list[str]:
    """Recompute a sample of the generated buckets with manifests/analysis/rollups.py and
    return the differences (empty: the set-based rollups equal the real code's)."""
    from manifests.analysis import rollups as real
    from manifests.figures import ROLLUP_MAP_FIELDS, ROLLUP_SUM_FIELDS
    from manifests.models import Rollup

    rows = list(Rollup.objects.filter(project_id=project_id).order_by("?")[:sample])
    problems = []
    for row in rows:
        compute = real.hour_values if row.bucket == Rollup.HOUR else real.day_values
        want = compute(project_id, row.start, row.agent, row.model)
        for f in (*ROLLUP_SUM_FIELDS, *ROLLUP_MAP_FIELDS):
            if want[f] != getattr(row, f):
                problems.append(
                    f"{row.bucket} {row.start:%Y-%m-%d %H}h {row.agent}/{row.model} {f}: "
                    f"generated {getattr(row, f)!r}, rollups.py {want[f]!r}"
                )
    return problems


def verify_figures(project_id: int, sample: int = 40) -> list[str]:
    """Recompute a sample of the generated calls with the real code and return the
    differences (empty: the generator wrote what the analysis would): tokens in context,
    hit rate, uncached tokens and cost with ctxkit.figures (cost at the price book's
    weights, as manifests/analysis/figures.py), and the cache event with
    manifests/analysis/cache.py's classify() against the previous call of the run."""
    from ctxkit import figures as ref
    from manifests.analysis import cache
    from manifests.analysis.prices import PriceBook
    from manifests.models import CacheEvent, Call, CallFigures, Item

    book = PriceBook.load()
    pks = list(Call.objects.filter(project_id=project_id, analyzed_at__isnull=False)
               .order_by("?").values_list("pk", flat=True)[:sample])
    calls = {c.pk: c for c in Call.objects.filter(pk__in=pks)}
    stored = {f.call_id: f for f in CallFigures.objects.filter(call_id__in=pks)}
    events = {e.call_id: e for e in CacheEvent.objects.filter(call_id__in=pks)}
    problems = []
    for pk in pks:
        call, got = calls[pk], stored.get(pk)
        if got is None:
            problems.append(f"call {pk}: no figures")
            continue
        want = {
            "context_tokens": ref.total_context_tokens(Item.objects.filter(call_id=pk)),
            "cache_hit_ratio": ref.hit_rate(call.cache_read_tokens, call.input_tokens),
            "uncached_input_tokens": ref.uncached_tokens(call),
            "cost": ref.cost_units(call, book.for_model(call.model).weights),
        }
        problems += [f"call {pk} {name}: generated {getattr(got, name)!r}, ctxkit.figures {value!r}"
                     for name, value in want.items() if getattr(got, name) != value]
        row = Call.objects.filter(pk=pk).values(*cache.NEIGHBOUR_FIELDS).get()
        prev = (Call.objects.filter(run_id=call.run_id, step=call.step - 1).values(*cache.NEIGHBOUR_FIELDS).first()
                if call.step > 0 else None)
        real, event = cache.classify(row, prev, book), events.get(pk)
        if event is None:
            problems.append(f"call {pk}: no cache event")
            continue
        for name in ("cause", "changed_segment", "previous_call_id", "hit_ratio", "previous_hit_ratio"):
            if getattr(event, name) != getattr(real, name):
                problems.append(f"call {pk} cache {name}: generated {getattr(event, name)!r}, "
                                f"classify {getattr(real, name)!r}")
        gap, real_gap = event.gap_seconds, real.gap_seconds
        if (gap is None) != (real_gap is None) or (gap is not None and abs(gap - real_gap) > 1e-6):
            problems.append(f"call {pk} cache gap_seconds: generated {gap!r}, classify {real_gap!r}")
    return problems


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
