"""The partitioning migration converts an existing database and keeps its rows.

Migrates the test database back to the migration before it, stores rows with the models
of that time, migrates forward, and checks the rows, the filled columns and (PostgreSQL)
that the tables are now partitioned by day. SQLite keeps plain tables and the same rows.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

APP = "manifests"
WHEN = datetime(2025, 6, 7, 8, 9, tzinfo=UTC)


def _partitioning_migration(executor: MigrationExecutor) -> tuple[tuple[str, str], tuple[str, str]]:
    """(the partitioning migration, the one before it), found by name so a renumbering keeps this test."""
    (node,) = [key for key in executor.loader.graph.nodes if key[0] == APP and key[1].endswith("_partitioning")]
    (parent,) = [p for p in executor.loader.graph.node_map[node].parents if p[0] == APP]
    return node, parent


def _migrate(targets: list[tuple[str, str]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection)


def _store_old_rows(apps) -> int:
    Project = apps.get_model(APP, "Project")
    Run = apps.get_model(APP, "Run")
    Call = apps.get_model(APP, "Call")
    Item = apps.get_model(APP, "Item")
    Evidence = apps.get_model(APP, "Evidence")
    Compaction = apps.get_model(APP, "Compaction")
    Invariant = apps.get_model(APP, "Invariant")
    ContextEdit = apps.get_model(APP, "ContextEdit")
    project = Project.objects.create(name="Legacy", slug="legacy")
    run = Run.objects.create(project=project, run_id="r", first_seen=WHEN, last_seen=WHEN)
    call = Call.objects.create(
        project=project,
        run=run,
        call_id="legacy-1",
        step=0,
        agent="a",
        model="m",
        started_at=WHEN,
        window=1000,
        input_cap=900,
        content_hash="h" * 64,
        raw="{}",
    )
    Item.objects.bulk_create(
        [Item(call=call, project=project, ordinal=n, item_id=f"i{n}", kind="doc", action="keep") for n in range(3)]
    )
    Evidence.objects.create(call=call, project=project, key="k", present=True)
    compaction = Compaction.objects.create(
        call=call, project=project, event_id="c", strategy="summary", tokens_before=10, tokens_after=5
    )
    Invariant.objects.create(compaction=compaction, name="user_constraints", ok=True)
    ContextEdit.objects.create(call=call, project=project, type="clear")
    return call.pk


def test_it_converts_an_existing_database_and_keeps_its_rows():
    executor = MigrationExecutor(connection)
    node, previous = _partitioning_migration(executor)
    leaves = executor.loader.graph.leaf_nodes()
    try:
        executor = _migrate([previous])
        call_pk = _store_old_rows(executor.loader.project_state(previous).apps)

        executor = _migrate([node])

        apps = executor.loader.project_state(node).apps
        Call = apps.get_model(APP, "Call")
        call = Call.objects.get(call_id="legacy-1")
        assert call.pk == call_pk and call.started_at == WHEN
        for name, count in [("Item", 3), ("Evidence", 1), ("Compaction", 1), ("ContextEdit", 1)]:
            rows = apps.get_model(APP, name).objects.filter(call_id=call_pk)
            assert rows.count() == count, name
            assert set(rows.values_list("started_at", flat=True)) == {WHEN}, name  # copied from the call
        assert list(apps.get_model(APP, "Invariant").objects.values_list("started_at", flat=True)) == [WHEN]
        key = apps.get_model(APP, "CallKey").objects.get(call_key="legacy-1")
        assert (key.call_id, key.content_hash, key.started_at) == (call_pk, "h" * 64, WHEN)
        # New rows get fresh ids after the copied ones.
        Item = apps.get_model(APP, "Item")
        Project = apps.get_model(APP, "Project")
        fresh = Item.objects.create(
            call_id=call_pk,
            project=Project.objects.get(slug="legacy"),
            ordinal=9,
            item_id="new",
            kind="doc",
            action="keep",
            started_at=WHEN,
        )
        assert fresh.pk > max(Item.objects.exclude(pk=fresh.pk).values_list("pk", flat=True))

        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(
                    "SELECT c.relname FROM pg_partitioned_table p JOIN pg_class c ON c.oid = p.partrelid "
                    "WHERE c.relname LIKE 'manifests\\_%%' ORDER BY 1"
                )
                assert [r[0] for r in cursor.fetchall()] == sorted(
                    [
                        "manifests_call",
                        "manifests_item",
                        "manifests_evidence",
                        "manifests_compaction",
                        "manifests_invariant",
                        "manifests_contextedit",
                    ]
                )
                cursor.execute(
                    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'manifests_item'::regclass AND c.relname = 'manifests_item_p20250607'"
                )
                assert cursor.fetchone() is not None
                cursor.execute("SELECT count(*) FROM manifests_item_p20250607")
                assert cursor.fetchone()[0] == 4
                # The primary key holds the partition key.
                cursor.execute(
                    "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                    "WHERE conrelid = 'manifests_item'::regclass AND contype = 'p'"
                )
                assert cursor.fetchone()[0] == "PRIMARY KEY (id, started_at)"
            else:
                cursor.execute("SELECT type FROM sqlite_master WHERE name = 'manifests_item'")
                assert cursor.fetchone()[0] == "table"

        # And back: the previous schema, plain tables, the same rows.
        executor = _migrate([previous])
        apps = executor.loader.project_state(previous).apps
        assert apps.get_model(APP, "Item").objects.filter(call_id=call_pk).count() == 4
        assert apps.get_model(APP, "Call").objects.get(call_id="legacy-1").started_at == WHEN
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_partitioned_table")
                assert cursor.fetchone()[0] == 0
    finally:
        _migrate(leaves)
