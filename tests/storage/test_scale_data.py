"""The benchmark data generator (bench/scale_data.py) writes the figures of the one
definition: manifests/figures.py's SQL expressions, compiled to raw SQL by
``figures.as_sql``, equal the ORM's and ctxkit.figures' values on stored calls (on
whichever database the suite runs on); and on PostgreSQL (the generator is
``INSERT ... SELECT`` from ``generate_series``, PostgreSQL only) a small generated dataset
has the figures, cache events and rollups the real code computes for the same calls.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import DatabaseError, connection
from django.db.models import F

from bench import scale_columns, scale_data
from ctxkit import figures as ref
from manifests import figures
from manifests.analysis.prices import PriceBook
from manifests.models import CacheEvent, Call, Item
from tests.analysis.support import item
from tests.support import manifest, store

USAGES = [  # input, cache read, cache write, output: plain, no input, writes beyond the input
    (2000, 1500, 0, 100),
    (0, 0, 0, 40),
    (900, 600, 700, 3),
    (123457, 0, 123457, 9999),
]


@pytest.mark.django_db
def test_the_raw_sql_of_a_figure_is_its_one_definition(project):
    weights = PriceBook.load().for_model("any-model").weights
    items = [item("a", tokens=300), item("b", action="drop", tokens=50),
             item("c", action="summarize", tokens=800, used=120)]
    (call,) = store(project, [manifest("c1", bare=True, items=items)])
    rate, uncached = figures.hit_rate(F("cache_read_tokens"), F("input_tokens")), figures.uncached_tokens()
    cost = figures.cost_units(weights=weights)
    for input_tokens, read, write, output in USAGES:
        Call.objects.filter(pk=call.pk).update(input_tokens=input_tokens, cache_read_tokens=read,
                                               cache_write_tokens=write, output_tokens=output)
        call.refresh_from_db()
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {figures.as_sql(rate, Call, 'c')}, {figures.as_sql(uncached, Call, 'c')}, "
                f"{figures.as_sql(cost, Call, 'c')} FROM {Call._meta.db_table} c WHERE c.id = %s", [call.pk])
            raw = cursor.fetchone()
            cursor.execute(f"SELECT sum({figures.as_sql(figures.context_tokens(), Item, 'i')}) "
                           f"FROM {Item._meta.db_table} i WHERE i.call_id = %s", [call.pk])
            raw_tokens = cursor.fetchone()[0]
        orm = Call.objects.filter(pk=call.pk).annotate(rate=rate, uncached=uncached, cost=cost).get()
        assert raw == (orm.rate, orm.uncached, orm.cost)
        assert raw[0] == ref.hit_rate(call.cache_read_tokens, call.input_tokens)
        assert raw[1] == ref.uncached_tokens(call)
        assert raw[2] == pytest.approx(ref.cost_units(call, weights), rel=1e-12)
        assert raw_tokens == ref.total_context_tokens(Item.objects.filter(call=call)) > 0


def test_the_generator_compiles_its_figures_from_the_definitions(db):
    weights = PriceBook.load().for_model(scale_columns.MODELS[0]).weights
    columns = scale_columns.FIGURES_COLUMNS
    assert columns["uncached_input_tokens"]() == figures.as_sql(figures.uncached_tokens(), Call, "c")
    assert columns["cache_hit_ratio"]() == figures.as_sql(
        figures.hit_rate(F("cache_read_tokens"), F("input_tokens")), Call, "c")
    assert figures.as_sql(figures.cost_units(weights=weights), Call, "c") in columns["cost"]()
    assert scale_columns.CACHE_EVENT_COLUMNS["previous_hit_ratio"]() == figures.as_sql(
        figures.hit_rate(F("cache_read_tokens"), F("input_tokens")), Call, "p")


@pytest.mark.django_db(transaction=True)
def test_generated_data_has_the_figures_the_real_code_computes(project, other_project):
    if connection.vendor != "postgresql":
        # The generator writes with PostgreSQL's generate_series and hashint8; on SQLite it
        # refuses rather than half-writing.
        with pytest.raises(DatabaseError), connection.cursor() as cursor:
            scale_data.generate(cursor, project_ids=[project.pk], items=100, per_call=5, days=1, log=lambda _: None)
        return
    # A day whose middle holds a change of the system prompt (every 2 days), so that every
    # cause a generated call can have occurs: cold start, hit, TTL expired, prefix changed.
    boundary = datetime.fromtimestamp((int(datetime(2026, 6, 1, tzinfo=UTC).timestamp()) // 172800 + 1) * 172800,
                                      UTC)
    with connection.cursor() as cursor:
        report = scale_data.generate(cursor, project_ids=[project.pk, other_project.pk], items=10_000, per_call=5,
                                     days=1, end=boundary + timedelta(hours=10), log=lambda _: None)
    assert report.calls > 0 and not report.stopped_early
    causes = set(CacheEvent.objects.filter(project=project).values_list("cause", flat=True))
    assert causes == {CacheEvent.COLD_START, CacheEvent.HIT, CacheEvent.TTL_EXPIRED, CacheEvent.PREFIX_CHANGED}
    for p in (project, other_project):
        assert scale_data.verify_figures(p.pk, sample=10_000) == []
        assert scale_data.verify_rollups(p.pk, sample=40) == []
