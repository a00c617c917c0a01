"""Rollups of the generated data, set-based, and the checks that the generator wrote what the
real code would (bench/scale_data.py generates; bench/scale_columns.py holds the column SQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def item_sums(cursor: Any, project_ids: Sequence[int]) -> None:
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
    # The same, named by the calls CTE where a table with agent and model columns of its own
    # (cache events, attributions) is joined to it.
    kc = "calls.p, calls.hr, calls.agent, calls.model"
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
                SELECT {kc}, a.cause, count(*) AS n FROM manifests_attribution a JOIN calls ON calls.id = a.call_id
                GROUP BY {kc}, a.cause) t GROUP BY {k}
        ),
        causes AS (
            SELECT {k}, jsonb_object_agg(cause, n ORDER BY cause) AS m,
                   coalesce(sum(n) FILTER (WHERE cause = 'prefix_changed'), 0) AS prefix_changes FROM (
                SELECT {kc}, e.cause, count(*) AS n FROM manifests_cacheevent e JOIN calls ON calls.id = e.call_id
                GROUP BY {kc}, e.cause) t GROUP BY {k}
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
                   round(coalesce(sum(f.cost_usd), 0)::numeric, 9)::float8 AS cost_usd,
                   count(*) FILTER (WHERE c.verified = 'yes') AS verified_successes,
                   sum(c.evidence_count) AS evidence_total, sum(c.evidence_count - c.evidence_missing) AS present
            FROM calls JOIN manifests_call c ON c.id = calls.id
            LEFT JOIN manifests_callfigures f ON f.call_id = c.id GROUP BY p, hr, calls.agent, calls.model
        )
        INSERT INTO manifests_rollup (project_id, bucket, start, agent, model, calls, items, input_tokens,
            cache_read_tokens, cache_write_tokens, output_tokens, uncached_input_tokens, cost, cost_usd,
            verified_successes, evidence_total, evidence_present, compactions, invariant_failures, attributions,
            cache_causes, tokens_by_kind, prefix_changes, computed_at)
        SELECT t.p, 'hour', t.hr, t.agent, t.model, t.calls, t.items, t.input_tokens, t.cache_read_tokens,
               t.cache_write_tokens, t.output_tokens, t.uncached, t.cost, t.cost_usd, t.verified_successes,
               t.evidence_total, t.present, coalesce(cm.n, 0), coalesce(cm.failures, 0), coalesce(a.m, '{{}}'),
               coalesce(cc.m, '{{}}'), coalesce(kd.m, '{{}}'), coalesce(cc.prefix_changes, 0), now()
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
            cache_read_tokens, cache_write_tokens, output_tokens, uncached_input_tokens, cost, cost_usd,
            verified_successes, evidence_total, evidence_present, compactions, invariant_failures, attributions,
            cache_causes, tokens_by_kind, prefix_changes, computed_at)
        SELECT h.project_id, 'day', h.d, h.agent, h.model, sum(calls), sum(items), sum(input_tokens),
               sum(cache_read_tokens), sum(cache_write_tokens), sum(output_tokens), sum(uncached_input_tokens),
               round(sum(cost)::numeric, 6)::float8, round(sum(cost_usd)::numeric, 9)::float8,
               sum(verified_successes), sum(evidence_total),
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
    hit rate, uncached tokens, cost, headroom and the shares of the window with
    ctxkit.figures (at the price book's weights and effective limit, as
    manifests/analysis/figures.py), the cache event with manifests/analysis/cache.py's
    classify() against the previous call of the run (a run's first call without the previous
    run's call: the generator does not model that link), and the figures copied onto the
    attributions."""
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
        items = list(Item.objects.filter(call_id=pk))
        context = ref.total_context_tokens(items)
        read = ref.input_read(call.input_tokens, context)
        limit = ref.effective_limit(call.window, book.for_model(call.model).effective_limit_ratio)
        want = {
            "context_tokens": context,
            "cache_hit_ratio": ref.hit_rate(call.cache_read_tokens, call.input_tokens),
            "uncached_input_tokens": ref.uncached_tokens(call),
            "cost": ref.cost_units(call, book.for_model(call.model).weights),
            "cost_usd": ref.cost_usd(call, book.usd(call.model, call.provider, call.input_tokens, call.started_at)),
            "headroom_tokens": ref.headroom(call.input_cap, read),
            "window_utilization": ref.window_utilization(read, call.window),
            "reserve_share": ref.reserve_share(call.output_reserve, call.window),
            "effective_limit": limit,
            "effective_share": ref.effective_share(read, limit),
            "tool_share": ref.tool_share(ref.total_context_tokens(i for i in items if i.kind == "tools"), context),
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
        for name in ("cause", "changed_segment", "previous_call_id", "hit_ratio", "previous_hit_ratio", "run_id",
                     "agent", "model"):
            if getattr(event, name) != getattr(real, name):
                problems.append(f"call {pk} cache {name}: generated {getattr(event, name)!r}, "
                                f"classify {getattr(real, name)!r}")
        if abs(event.saving - real.saving) > 1e-9 * max(1.0, abs(real.saving)):
            problems.append(f"call {pk} cache saving: generated {event.saving!r}, classify {real.saving!r}")
        if (event.saving_usd is None) != (real.saving_usd is None) or (
                real.saving_usd is not None and abs(event.saving_usd - real.saving_usd) > 1e-12):
            problems.append(f"call {pk} cache saving_usd: generated {event.saving_usd!r}, "
                            f"classify {real.saving_usd!r}")
        gap, real_gap = event.gap_seconds, real.gap_seconds
        if (gap is None) != (real_gap is None) or (gap is not None and abs(gap - real_gap) > 1e-6):
            problems.append(f"call {pk} cache gap_seconds: generated {gap!r}, classify {real_gap!r}")
        problems += _attribution_problems(call, got.cost, got.cost_usd)
    return problems


def _attribution_problems(call: Any, cost: float, cost_usd: float | None) -> list[str]:
    """The call's attributions against what manifests/analysis/attribution.py stores: its
    call's run, agent and model, and its cost on its first attribution of each cause only."""
    from manifests.models import Attribution

    problems, costed = [], set()
    for a in Attribution.objects.filter(call_id=call.pk).order_by("pk"):
        for name in ("run_id", "agent", "model"):
            if getattr(a, name) != getattr(call, name):
                problems.append(f"call {call.pk} attribution {a.pk} {name}: generated {getattr(a, name)!r}, "
                                f"call {getattr(call, name)!r}")
        want = None if a.cause in costed else cost
        costed.add(a.cause)
        if a.call_cost != want:
            problems.append(f"call {call.pk} attribution {a.pk} call_cost: generated {a.call_cost!r}, "
                            f"analysis {want!r}")
        want_usd = None if want is None else cost_usd
        if a.call_cost_usd != want_usd:
            problems.append(f"call {call.pk} attribution {a.pk} call_cost_usd: generated {a.call_cost_usd!r}, "
                            f"analysis {want_usd!r}")
    return problems
