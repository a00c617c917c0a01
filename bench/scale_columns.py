"""The SQL of the set-based data generator (bench/scale_data.py): one mapping per table from column
to SQL expression over the generator's row sources (``*_COLUMNS``), or to a function returning one
when it is compiled from the server's definitions (manifests/figures.py) at generation time.

A schema change (a new column, a renamed one) is a change here; the generator's steps, the
rollups and the checks against the real code live in scale_data.py and scale_rollups.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ctxkit.figures import BUDGET, COMPACTION, NEVER_CANDIDATE, NOT_USED, TRUNCATED

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
# are then classified from the stored calls (:func:`event_cause`), and verify_figures checks
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
    "cwd": "''",
    "git_branch": "''",
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
    "cache_write_1h_tokens": "0",
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
ITEM_HASH = "c.run_id * 4096 + i"
ITEM_HASH_CALL = "c.g * 4096 + i"
ITEM_KIND = (
    "CASE WHEN i = 0 THEN 'system' WHEN i = 1 THEN 'tools' WHEN i = 2 THEN 'task' ELSE "
    "(ARRAY['history','history','history','history','history','history','history','tool_result','tool_result',"
    "'tool_result','tool_result','tool_result','retrieval','retrieval','retrieval','retrieval','memory','memory',"
    f"'summary','example'])[{h(ITEM_HASH, 11, 20)} + 1] END"
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
    + f"CASE WHEN {h(ITEM_HASH_CALL, 25, 10)} = 0 THEN {h(ITEM_HASH_CALL, 12, 100)} ELSE {h(ITEM_HASH, 12, 100)} END"
    + " + 1] END"
)
# Heavy-tailed: most items are a few hundred tokens, a few are several thousand.
REQUESTED = (
    f"CASE WHEN i = 0 THEN 900 WHEN i = 1 THEN 1500 WHEN i = 2 THEN 300 + {h(ITEM_HASH, 13, 400)} "
    f"ELSE 20 + {h(ITEM_HASH, 14, 1000)} * {h(ITEM_HASH, 15, 1000)} / 250 END"
)
GRANTED = (
    "CASE x.action WHEN 'keep' THEN x.requested WHEN 'drop' THEN 0 WHEN 'dedupe' THEN 0 "
    "WHEN 'summarize' THEN greatest(1, x.requested / 5) WHEN 'ref' THEN 20 "
    f"ELSE greatest(1, x.requested * (30 + {h(ITEM_HASH, 16, 50)}) / 100) END"
)

ITEM_COLUMNS: dict[str, str] = {
    "call_id": "c.id",
    "project_id": "c.project_id",
    "ordinal": "i",
    "item_id": "'item-' || i",
    "kind": "x.kind",
    "action": "x.action",
    "trust": f"CASE WHEN x.kind IN ('tool_result', 'retrieval') AND {h(ITEM_HASH, 17, 10)} < 3 "
    "THEN 'untrusted' ELSE 'trusted' END",
    "priority": f"CASE WHEN i < 3 THEN 100 ELSE {h(ITEM_HASH, 18, 100)} END",
    "pinned": "i < 3",
    "zone": "CASE WHEN x.granted = 0 THEN NULL WHEN i < 3 THEN 'head' "
    "WHEN i >= c.item_count - 5 THEN 'tail' ELSE 'middle' END",
    "position": "CASE WHEN x.granted = 0 THEN NULL ELSE i END",
    "requested_tokens": "x.requested",
    "granted_tokens": "x.granted",
    "used_tokens": "x.granted",
    "reason": "x.action || ': ' || x.granted || ' of ' || x.requested || ' tokens granted at priority weight '"
    f" || {h(ITEM_HASH, 19, 100)} || ' (' || x.kind || ' policy, floor ' || {h(ITEM_HASH, 20, 64)} || ')'",
    "source_ref": f"CASE WHEN x.kind = 'retrieval' THEN 'kb://docs/' || {h(ITEM_HASH, 21, 100000)} ELSE NULL END",
    "source_version": "NULL",
    "content_hash": "md5(c.run_id || ':' || i || ':' || "
    f"CASE WHEN {h(ITEM_HASH, 22, 20)} = 0 THEN c.step ELSE 0 END) || md5(i || ':' || c.run_id)",
    "group": "NULL",
    "text": "CASE WHEN {text_share_test} THEN repeat(md5(c.g || ':' || i) || ' ', "
    f"6 + {h(ITEM_HASH, 23, 50)}) ELSE NULL END",
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


def _cost_usd() -> str:
    """The analysis's cost in USD (manifests/analysis/figures.py): ctxkit.figures.cost_usd at the
    USD prices of the call's model (genai-prices' table, as of today: the generated inputs stay
    below every tier), compiled from manifests/figures.py once per generated model; NULL for a
    model without a USD price."""
    from datetime import UTC, datetime

    from manifests import figures
    from manifests.analysis.prices import PriceBook
    from manifests.models import Call

    book, now = PriceBook.load(), datetime.now(tz=UTC)
    whens = " ".join(
        f"WHEN '{m}' THEN {figures.as_sql(figures.cost_usd(usd), Call, 'c') if usd else 'NULL'}"
        for m in MODELS for usd in [book.usd(m, "", 0, now)]
    )
    return f"CASE c.model {whens} END"


def _usd_saving() -> str:
    """The saving of a cache miss in USD, as :func:`_cost_usd` compiles the cost."""
    from datetime import UTC, datetime

    from manifests import figures
    from manifests.analysis.prices import PriceBook
    from manifests.models import Call

    book, now = PriceBook.load(), datetime.now(tz=UTC)
    whens = " ".join(
        f"WHEN '{m}' THEN {figures.as_sql(figures.cache_saving('', usd.weights), Call, 'c') if usd else 'NULL'}"
        for m in MODELS for usd in [book.usd(m, "", 0, now)]
    )
    return f"CASE c.model {whens} END"


def _per_model(build: Callable[[Any, Any], Any]) -> Callable[[], str]:
    """A figure of manifests/figures.py that depends on the call's model's price row, over
    the call row ``c`` and the item sums ``s``, as one CASE on the model: ``build`` gets the
    module and the model's price."""

    def compiled() -> str:
        from manifests import figures
        from manifests.analysis.prices import PriceBook
        from manifests.models import Call

        book = PriceBook.load()
        whens = " ".join(f"WHEN '{m}' THEN {figures.as_sql(build(figures, book.for_model(m)), Call, 'c')}"
                         for m in MODELS)
        return f"CASE c.model {whens} END"

    return compiled


def _sums(column: str) -> Any:
    """A column of the per-call item sums (s) inside a figure compiled over the call row."""
    from django.db.models import BigIntegerField
    from django.db.models.expressions import RawSQL

    return RawSQL(f"s.{column}", [], output_field=BigIntegerField())


def _col(name: str) -> Any:
    """A column of the call row (c) inside a figure compiled over it."""
    from django.db.models import F

    return F(name)


def _read(figures: Any) -> Any:
    return figures.input_read(_col("input_tokens"), _sums("tokens"))


# Figures: per call, from the per-call item sums in scale_item_sums (s) and the call (c).
FIGURES_COLUMNS: dict[str, str | Callable[[], str]] = {
    "call_id": "c.id",
    "project_id": "c.project_id",
    "started_at": "c.started_at",
    "context_tokens": "s.tokens",
    "uncached_input_tokens": _call_figure("c", lambda f: f.uncached_tokens()),
    "cache_hit_ratio": _hit_rate("c"),
    "window_utilization": _call_figure("c", lambda f: f.window_utilization(_read(f), _col("window"))),
    "effective_limit": _per_model(lambda f, price: f.effective_limit(_col("window"), price.effective_limit_ratio)),
    "effective_share": _per_model(lambda f, price: f.effective_share(
        _read(f), f.effective_limit(_col("window"), price.effective_limit_ratio))),
    "reserve_share": _call_figure("c", lambda f: f.reserve_share(_col("output_reserve"), _col("window"))),
    "headroom_tokens": _call_figure("c", lambda f: f.headroom(_col("input_cap"), _read(f))),
    "duplicate_ratio": "CASE WHEN s.requested > 0 THEN s.dedupe_requested::float8 / s.requested ELSE 0 END",
    "duplicate_context_tokens": "0",
    "evidence_coverage": f"(c.evidence_count - c.evidence_missing)::float8 / {len(EVIDENCE_KEYS)}",
    "tool_tokens": "s.tool_tokens",
    "tool_share": _call_figure("c", lambda f: f.tool_share(_sums("tool_tokens"), _sums("tokens"))),
    "untrusted_tokens": "s.untrusted_tokens",
    "cost": _cost,
    "cost_usd": _cost_usd,
    "evidence_positions": "'{}'::jsonb",
}

# The cause of evidence row e's attribution.
ATTRIBUTION_CAUSE = (
    f"CASE WHEN e.present THEN '{NOT_USED}' WHEN e.expected_item IS NULL THEN '{NEVER_CANDIDATE}' "
    f"WHEN {h('e.id', 40, 10)} < 6 THEN '{BUDGET}' WHEN {h('e.id', 40, 10)} < 9 THEN '{TRUNCATED}' "
    f"ELSE '{COMPACTION}' END"
)

# Attributions: per evidence row e (with e.nth, its rank among its call's evidence of the
# same cause) and its call c. The call's cost goes on its first attribution of each cause, as
# manifests/analysis/attribution.py's attribute() puts it.
ATTRIBUTION_COLUMNS: dict[str, str | Callable[[], str]] = {
    "project_id": "e.project_id",
    "call_id": "e.call_id",
    "evidence_id": "e.id",
    "evidence_key": "e.key",
    "cause": ATTRIBUTION_CAUSE,
    "fix": "CASE WHEN e.present THEN 'Place it nearer the end of the context or mark it required' "
    "ELSE 'Pin the item or raise its priority above the budget cut' END",
    "item_id": "coalesce(e.expected_item, '')",
    "action": "CASE WHEN e.present THEN 'keep' ELSE 'drop' END",
    "reason": "CASE WHEN e.present THEN 'kept whole' ELSE 'drop: 0 tokens granted under budget pressure' END",
    "is_risk": "e.present",
    "lost_at_id": "NULL",
    "started_at": "c.started_at",
    "run_id": "c.run_id",
    "agent": "c.agent",
    "model": "c.model",
    "call_cost": lambda: f"CASE WHEN e.nth = 1 THEN {_cost()} END",
    "call_cost_usd": lambda: f"CASE WHEN e.nth = 1 THEN {_cost_usd()} END",
}

# The gap the analysis measures: from the previous call's end (when the cache was last used).
_GAP = "extract(epoch FROM c.started_at - coalesce(p.ended_at, p.started_at))"


def event_cause() -> str:
    """The cause of call c's cache outcome, given the previous call p of its run (NULL for
    the first): the branches of manifests/analysis/cache.py's classify() that generated data
    can reach, in classify's order, with its names (CacheEvent's constants).

    classify has no SQL form (it runs in Python per analysed chunk), so this is the subset
    that generated calls need, not a second definition; verify_figures runs classify on a
    sample and compares. Left out, because no generated call can reach them: "below the
    minimum" (every prefix is 1,800+ tokens, above the default 1,024), a model change
    within a run (a run has one model), "first call warm from another run" (a first step
    never reads the cache), the price book's TTL (every call records its TTL), and a context
    edit on a request that only grew (no generated call caches messages or records an edit).
    Not modelled: the comparison of a run's first call with the previous run's call (a first
    call here is a cold start; verify_figures runs classify without that call, as it is called
    without ``earlier``)."""
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
    "run_id": "c.run_id",
    "agent": "c.agent",
    "model": "c.model",
    "saving": _per_model(lambda f, price: f.cache_saving("", price.weights)),
    "saving_usd": _usd_saving,
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


def columns_sql(columns: Mapping[str, str | Callable[[], str]]) -> tuple[str, str]:
    return ", ".join(f'"{c}"' for c in columns), ", ".join(v() if callable(v) else v for v in columns.values())
