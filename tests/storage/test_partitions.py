"""Time partitions of the raw tables (manifests/storage/partitions.py) and retention by partition.

On PostgreSQL the calls and their children live in one partition per UTC day; on SQLite
the same code paths run against plain tables. Every test asserts on both databases.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from manifests import tasks
from manifests.models import Call as CallModel
from manifests.models import CallKey, Compaction, ContextEdit, Evidence, Invariant, Item, Project, Rollup
from manifests.selectors import calls as call_selectors
from manifests.selectors import series
from manifests.selectors.filters import Filters
from manifests.storage import partitions, retention
from tests.analysis.support import flush_rollups
from tests.support import T0, manifest, store_and_analyse

pytestmark = pytest.mark.django_db

OLD = T0 - timedelta(days=60)
RECENT = T0 - timedelta(days=2)
NOW = T0


def at(moment: datetime, call_id: str, *, run_id: str, step: int = 0, items: int = 4) -> dict:
    m = manifest(call_id, run_id=run_id, step=step, items=items)
    m["started_at"] = (moment + timedelta(seconds=step)).isoformat()
    return m


def partition_rows(table: str, day) -> int | None:
    """Rows in ``table``'s partition of ``day`` (PostgreSQL), None when it does not exist."""
    name = partitions.partition_name(table, day)
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(f'SELECT count(*) FROM "{name}"')
        return cursor.fetchone()[0]


def is_partitioned(table: str) -> bool:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT count(*) FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [table])
            return cursor.fetchone()[0] == 1
        return False


def test_it_creates_the_partitions_ahead(settings):
    settings.CTXVIEW_PARTITIONS_AHEAD_DAYS = 3
    today = datetime.now(UTC).date()
    wanted = [today + timedelta(days=n) for n in range(4)]

    tasks.ensure_partitions.apply().get()  # the beat task's body, run here

    if connection.vendor == "postgresql":
        assert all(is_partitioned(t) for t in partitions.PARTITIONED_TABLES)
        for table in partitions.PARTITIONED_TABLES:
            assert set(wanted) <= set(partitions.partition_days(table)), table
        assert partitions.missing_days(wanted) == []
        # Run again: nothing left to create.
        assert partitions.ensure_ahead(days=3) == 0
    else:
        # SQLite keeps plain tables: nothing to create, nothing partitioned.
        assert partitions.ensure_ahead(days=3) == 0
        assert partitions.partition_days() == []
        assert not any(is_partitioned(t) for t in partitions.PARTITIONED_TABLES)


def test_it_creates_a_partition_on_demand_for_a_back_dated_call(api):
    back = datetime(2001, 3, 4, 5, 6, tzinfo=UTC)
    m = manifest("back-dated", run_id="late", items=5)
    m["started_at"] = back.isoformat()
    m["ended_at"] = (back + timedelta(seconds=2)).isoformat()

    r = api.post(m)

    assert r.status_code == 200, r.content
    assert r.json()["accepted"] == 1
    call = CallModel.objects.get(call_id="back-dated")
    assert call.items.count() == 5
    assert set(Item.objects.filter(call=call).values_list("started_at", flat=True)) == {back}
    assert CallKey.objects.get(call_key="back-dated").call_id == call.pk
    if connection.vendor == "postgresql":
        assert partition_rows("manifests_call", back.date()) == 1
        assert partition_rows("manifests_item", back.date()) == 5
        assert partition_rows("manifests_evidence", back.date()) == call.evidence.count()
    # The same post again is a duplicate: the idempotency registry spans every partition.
    again = api.post(m)
    assert again.json()["duplicates"] == 1
    assert CallModel.objects.filter(call_id="back-dated").count() == 1


def test_the_call_view_reads_the_call_and_its_children_from_its_day(project):
    store_and_analyse(project, [at(RECENT, "c-0", run_id="r", items=6), at(OLD, "c-old", run_id="r2", items=3)])

    with CaptureQueriesContext(connection) as ctx:
        call = call_selectors.call_with_children(project, "c-0")

    assert [i.ordinal for i in call.items.all()] == list(range(6))
    assert call.compactions.all()[0].invariants.all()
    # Every read of a partitioned table names the call's time, so PostgreSQL prunes to one day.
    for table in partitions.PARTITIONED_TABLES:
        reads = [q["sql"] for q in ctx.captured_queries if f'FROM "{table}"' in q["sql"]]
        assert reads, table
        for sql in reads:
            assert f'"{table}"."started_at" = ' in sql, sql


def test_the_call_page_reads_every_partitioned_table_by_the_call_s_or_the_run_s_time(project, owner):
    # A run over two days, and another run in the same days: the page's previous and next
    # calls are read within the run's span, its items and evidence from the call's day.
    store_and_analyse(project, [at(RECENT + timedelta(hours=20 * n), f"r-{n}", run_id="r", step=n) for n in range(3)])
    store_and_analyse(project, [at(RECENT, "o-0", run_id="o")])
    from django.test import Client

    client = Client()
    client.force_login(owner)
    with CaptureQueriesContext(connection) as ctx:
        body = client.get(f"/p/{project.slug}/calls/r-1/").content.decode()
    assert 'id="prev-call"' in body and 'id="next-call"' in body and 'data-item="item-3"' in body
    for table in partitions.PARTITIONED_TABLES:
        for sql in (q["sql"] for q in ctx.captured_queries if f'FROM "{table}"' in q["sql"]):
            assert (f'"{table}"."started_at" = ' in sql
                    or f'"{table}"."started_at" >= ' in sql and f'"{table}"."started_at" <= ' in sql), sql


@pytest.fixture
def aged(project, other_project):
    store_and_analyse(project, [at(OLD, f"old-{n}", run_id="old-run", step=n) for n in range(3)])
    store_and_analyse(project, [at(RECENT, f"new-{n}", run_id="new-run", step=n) for n in range(2)])
    store_and_analyse(other_project, [at(RECENT, "other-0", run_id="other")])
    flush_rollups()  # with Redis the beat refreshes rollups; here they must be there before the expiry
    return project


def test_expired_partitions_disappear_and_the_trend_stays_from_rollups(aged, other_project):
    old_day = OLD.date()
    window = Filters(since=OLD - timedelta(days=1), until=NOW)
    trend_before = series.series(aged, window)
    assert sum(trend_before.sums["calls"]) == 5
    rollups_before = Rollup.objects.filter(project=aged).count()
    if connection.vendor == "postgresql":
        assert partition_rows("manifests_item", old_day) == 3 * 4

    totals = retention.enforce_retention(now=NOW)

    assert totals["calls"] == 3
    assert sorted(CallModel.objects.filter(project=aged).values_list("call_id", flat=True)) == ["new-0", "new-1"]
    assert CallModel.objects.filter(project=other_project).count() == 1
    for model in (Item, Evidence, Compaction, ContextEdit):
        assert not model.objects.filter(started_at__lt=OLD + timedelta(days=1)).exists(), model
    assert not Invariant.objects.filter(started_at__lt=OLD + timedelta(days=1)).exists()
    assert not CallKey.objects.filter(call_key__startswith="old-").exists()
    if connection.vendor == "postgresql":
        # The old day went as whole partitions, not row by row.
        assert totals["partitions"] >= 1
        assert old_day not in partitions.partition_days()
        assert all(partition_rows(t, old_day) is None for t in partitions.PARTITIONED_TABLES)
        assert RECENT.date() in partitions.partition_days()
    else:
        assert totals["partitions"] == 0
    # Rollups outlive the raw rows: the trend over the same window is unchanged.
    assert Rollup.objects.filter(project=aged).count() == rollups_before
    trend_after = series.series(aged, window)
    assert trend_after.starts == trend_before.starts
    assert trend_after.sums["calls"] == trend_before.sums["calls"]


def test_a_project_with_a_longer_retention_keeps_its_day(aged, other_project):
    store_and_analyse(other_project, [at(OLD, "other-old", run_id="other")])
    other_project.retention_days = 90
    other_project.save()

    totals = retention.enforce_retention(now=NOW)

    # The old day is not past every project's retention: it stays, and the short-lived
    # project's calls in it are deleted by rows.
    assert totals["partitions"] == 0
    assert totals["calls"] == 3
    assert not CallModel.objects.filter(project=aged, started_at__lt=RECENT - timedelta(days=1)).exists()
    kept = CallModel.objects.get(project=other_project, call_id="other-old")
    assert kept.items.count() == 4
    if connection.vendor == "postgresql":
        assert partition_rows("manifests_item", OLD.date()) == 4


def test_a_project_is_deleted_with_the_same_statements_whatever_its_size(project, other_project):
    store_and_analyse(project, [at(RECENT, f"s-{n}", run_id="s", step=n, items=2) for n in range(2)])
    store_and_analyse(other_project, [at(RECENT, f"b-{n}", run_id="b", step=n, items=60) for n in range(20)])
    assert Item.objects.filter(project=other_project).count() == 1200

    with CaptureQueriesContext(connection) as small:
        retention.delete_project(project=project)
    with CaptureQueriesContext(connection) as big:
        retention.delete_project(project=other_project)

    # Set-based: one statement per table, not per row, so the count does not grow with the data.
    assert len(big.captured_queries) == len(small.captured_queries)
    assert not Item.objects.filter(project__in=[project, other_project]).exists()
    assert not CallKey.objects.filter(project__in=[project, other_project]).exists()
    assert not Project.objects.filter(pk__in=[project.pk, other_project.pk]).exists()


@pytest.mark.django_db(transaction=True)
def test_it_stores_a_call_whose_days_partitions_another_process_dropped(api):
    """Ingest remembers the days whose partitions it saw (no catalog query for them); a day
    dropped behind its back (retention in another process) costs a retried attempt, not a call."""
    day = datetime(2001, 5, 6, 7, 8, tzinfo=UTC)

    def post(call_id: str):
        m = manifest(call_id, run_id="dropped-day", items=3)
        m["started_at"] = day.isoformat()
        m["ended_at"] = (day + timedelta(seconds=1)).isoformat()
        return api.post(m)

    assert post("before-drop").json()["accepted"] == 1
    with CaptureQueriesContext(connection) as queries:
        assert post("seen-day").json()["accepted"] == 1
    if connection.vendor == "postgresql":
        assert not [q for q in queries if "to_regclass" in q["sql"]]  # the day was seen
        with connection.cursor() as cursor:  # as another process's retention would
            for table in reversed(partitions.PARTITIONED_TABLES):
                cursor.execute(f'DROP TABLE "{partitions.partition_name(table, day.date())}"')
        CallKey.objects.all().delete()

    r = post("after-drop")

    assert r.status_code == 200, r.content
    assert r.json()["accepted"] == 1
    call = CallModel.objects.get(call_id="after-drop")
    assert call.items.count() == 3
    if connection.vendor == "postgresql":
        assert partition_rows("manifests_call", day.date()) == 1


def _bounded(sql: str, table: str) -> bool:
    """Whether a read of ``table`` names its partition key with both bounds or one time."""
    return (f'"{table}"."started_at" = ' in sql
            or f'"{table}"."started_at" >= ' in sql and (f'"{table}"."started_at" <= ' in sql
                                                          or f'"{table}"."started_at" < ' in sql))


def test_exports_read_the_items_and_evidence_of_the_range_from_its_days(project):
    from django.http import QueryDict

    from manifests.selectors import exports, filters
    from manifests.selectors.call_list import CallQuery

    store_and_analyse(project, [at(RECENT, "c-0", run_id="r", items=3), at(OLD, "c-old", run_id="o", items=5)])
    week = filters.parse(QueryDict("range=7d"), now=NOW)
    for kind, table, count in (("items", "manifests_item", 3), ("evidence", "manifests_evidence", 1)):
        with CaptureQueriesContext(connection) as ctx:
            rows = list(exports.rows(project, week, CallQuery(), kind))
        assert len(rows) == count and {r[0] for r in rows} == {"c-0"}
        reads = [q["sql"] for q in ctx.captured_queries if f'FROM "{table}"' in q["sql"]]
        # The range has a start and no end (up to now): the start prunes every older day.
        assert reads and all(f'"{table}"."started_at" >= ' in sql for sql in reads), reads


def test_tracing_missing_evidence_reads_the_run_from_its_days(project):
    from manifests import analysis

    calls = store_and_analyse(project, [at(RECENT + timedelta(hours=20 * n), f"r-{n}", run_id="r", step=n)
                                        for n in range(3)])
    store_and_analyse(project, [at(OLD, "o-0", run_id="o")])
    CallModel.objects.filter(pk=calls[-1].pk).update(analyzed_at=None)
    with CaptureQueriesContext(connection) as ctx:
        assert analysis.analyze_calls([calls[-1].pk]) == 1
    by_run = [q["sql"] for q in ctx.captured_queries
              if 'FROM "manifests_call"' in q["sql"] and '"manifests_call"."run_id" IN' in q["sql"]]
    evidence = [q["sql"] for q in ctx.captured_queries if 'FROM "manifests_evidence"' in q["sql"]]
    assert by_run and evidence
    assert all(_bounded(sql, "manifests_call") for sql in by_run), by_run
    assert all(_bounded(sql, "manifests_evidence") for sql in evidence), evidence
    assert calls[-1].attributions.count() >= 1
