"""Time partitioning of the raw tables (docs/scaling.md, "Partitioning").

Both databases: the idempotency registry (CallKey) filled from the stored calls; the call's
started_at copied onto items, evidence, compactions, invariants and context edits (the
partition key); foreign keys that point at those tables lose their database constraint.
PostgreSQL only: each of the six tables is rebuilt as a table partitioned by RANGE
(started_at) with one partition per UTC day that holds rows (and the days ahead), its rows
copied, then swapped in under the old name with the old indexes; the primary key becomes
(id, started_at). SQLite keeps plain tables (the conversion is a no-op there).

The copy takes about as long as a full table rewrite: run it in a maintenance window on a
large database (docs/deploy.md, "Upgrading to partitioned tables").
"""

from datetime import UTC, datetime, timedelta

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models




# The tables, parents first, each with the (parent table, column) its started_at comes from.
TABLES = [
    ("manifests_call", None),
    ("manifests_item", ("manifests_call", "call_id")),
    ("manifests_evidence", ("manifests_call", "call_id")),
    ("manifests_compaction", ("manifests_call", "call_id")),
    ("manifests_invariant", ("manifests_compaction", "compaction_id")),
    ("manifests_contextedit", ("manifests_call", "call_id")),
]
AHEAD_DAYS = 7


def fill_call_keys(apps, schema_editor):
    schema_editor.execute(
        "INSERT INTO manifests_callkey (project_id, call_key, content_hash, call_id, started_at) "
        "SELECT project_id, call_id, content_hash, id, started_at FROM manifests_call"
    )


def fill_started_at_sqlite(apps, schema_editor):
    # On PostgreSQL the copy into the partitioned tables fills started_at (one pass, not two).
    if schema_editor.connection.vendor == "postgresql":
        return
    for table, (parent, column) in TABLES[1:]:
        schema_editor.execute(
            f"UPDATE {table} SET started_at = (SELECT p.started_at FROM {parent} p WHERE p.id = {table}.{column})"
        )


def _rows(cursor, sql, params=()):
    cursor.execute(sql, params)
    return cursor.fetchall()


def _rebuild(cursor, table, *, partitioned, source=None):
    """Rebuild ``table`` as a partitioned (or plain) table under the same name: same columns,
    defaults, checks, identity, indexes and foreign keys; rows copied (started_at taken from
    ``source`` = (parent table, column) when given)."""
    old = f"{table}__old"
    indexes = _rows(
        cursor,
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = %s "
        "AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p')",
        [table, table],
    )
    fks = _rows(
        cursor,
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
        [table],
    )
    (pkey,) = _rows(cursor, "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'", [table])[0]
    (sequence,) = _rows(cursor, "SELECT pg_get_serial_sequence(%s, 'id')", [table])[0]
    for name, _ in indexes:
        cursor.execute(f'DROP INDEX "{name}"')
    cursor.execute(f'ALTER TABLE "{table}" RENAME TO "{old}"')
    cursor.execute(f'ALTER TABLE "{old}" RENAME CONSTRAINT "{pkey}" TO "{old}_pkey"')
    cursor.execute(f"ALTER SEQUENCE {sequence} RENAME TO \"{old}_id_seq\"")
    like = f'LIKE "{old}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY INCLUDING STORAGE INCLUDING COMPRESSION'
    if partitioned:
        cursor.execute(f'CREATE TABLE "{table}" ({like}, CONSTRAINT "{pkey}" PRIMARY KEY (id, started_at)) '
                       "PARTITION BY RANGE (started_at)")
    else:
        cursor.execute(f'CREATE TABLE "{table}" ({like}, CONSTRAINT "{pkey}" PRIMARY KEY (id))')
    return old, indexes, fks


def _copy_and_swap(cursor, table, old, indexes, fks, source):
    columns = [r[0] for r in _rows(
        cursor,
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = %s ORDER BY ordinal_position",
        [old],
    )]
    names = ", ".join(f'"{c}"' for c in columns)
    if source is None:
        cursor.execute(f'INSERT INTO "{table}" ({names}) OVERRIDING SYSTEM VALUE SELECT {names} FROM "{old}"')
    else:
        parent, column = source
        picked = ", ".join("p.started_at" if c == "started_at" else f'o."{c}"' for c in columns)
        cursor.execute(
            f'INSERT INTO "{table}" ({names}) OVERRIDING SYSTEM VALUE SELECT {picked} FROM "{old}" o '
            f'JOIN "{parent}" p ON p.id = o."{column}"'
        )
    cursor.execute(f'DROP TABLE "{old}"')
    for _, definition in indexes:
        cursor.execute(definition.replace(" ON ONLY ", " ON "))
    for name, definition in fks:
        cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" {definition}')
    cursor.execute(
        f"SELECT setval(pg_get_serial_sequence(%s, 'id'), COALESCE((SELECT max(id) FROM \"{table}\"), 0) + 1, false)",
        [table],
    )


def _create_partitions(cursor, days):
    for day in sorted(days):
        lo = datetime(day.year, day.month, day.day, tzinfo=UTC)
        for table, _ in TABLES:
            name = f"{table}_p{day:%Y%m%d}"
            cursor.execute(
                f'CREATE TABLE "{name}" PARTITION OF "{table}" FOR VALUES FROM (%s) TO (%s)',
                [lo.isoformat(), (lo + timedelta(days=1)).isoformat()],
            )


def partition_tables(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        days = {r[0] for r in _rows(cursor, "SELECT DISTINCT (started_at AT TIME ZONE 'UTC')::date FROM manifests_call")}
        today = datetime.now(UTC).date()
        days |= {today + timedelta(days=n) for n in range(AHEAD_DAYS + 1)}
        rebuilt = [(table, source, *_rebuild(cursor, table, partitioned=True)) for table, source in TABLES]
        _create_partitions(cursor, days)
        for table, source, old, indexes, fks in rebuilt:
            _copy_and_swap(cursor, table, old, indexes, fks, source)


def unpartition_tables(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        for table, _ in TABLES:
            old, indexes, fks = _rebuild(cursor, table, partitioned=False)
            _copy_and_swap(cursor, table, old, indexes, fks, None)


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0007_membership_viewer'),
    ]

    operations = [
        migrations.CreateModel(
            name='CallKey',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('call_key', models.CharField(help_text="The manifest's call_id", max_length=200)),
                ('content_hash', models.CharField(max_length=64)),
                ('started_at', models.DateTimeField()),
            ],
        ),
        migrations.RemoveConstraint(
            model_name='call',
            name='call_unique_per_project',
        ),
        migrations.AddField(
            model_name='compaction',
            name='started_at',
            field=models.DateTimeField(default=django.utils.timezone.now, help_text="The call's time: the partition key"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='contextedit',
            name='started_at',
            field=models.DateTimeField(default=django.utils.timezone.now, help_text="The call's time: the partition key"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='evidence',
            name='started_at',
            field=models.DateTimeField(default=django.utils.timezone.now, help_text="The call's time: the partition key"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='invariant',
            name='started_at',
            field=models.DateTimeField(default=django.utils.timezone.now, help_text="The call's time: the partition key"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='item',
            name='started_at',
            field=models.DateTimeField(default=django.utils.timezone.now, help_text="The call's time: the partition key"),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name='attribution',
            name='call',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='attributions', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='attribution',
            name='evidence',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='manifests.evidence'),
        ),
        migrations.AlterField(
            model_name='attribution',
            name='lost_at',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='cacheevent',
            name='call',
            field=models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='cache_event', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='cacheevent',
            name='previous_call',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='callfigures',
            name='call',
            field=models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='figures', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='compaction',
            name='call',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='compactions', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='compactionfigures',
            name='call',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='compactionfigures',
            name='compaction',
            field=models.OneToOneField(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='figures', to='manifests.compaction'),
        ),
        migrations.AlterField(
            model_name='contextedit',
            name='call',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='context_edits', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='evidence',
            name='call',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='evidence', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='invariant',
            name='compaction',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='invariants', to='manifests.compaction'),
        ),
        migrations.AlterField(
            model_name='item',
            name='call',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='items', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='regression',
            name='call',
            field=models.ForeignKey(db_constraint=False, help_text='The call where the rolling rate crossed the threshold', on_delete=django.db.models.deletion.CASCADE, related_name='+', to='manifests.call'),
        ),
        migrations.AlterField(
            model_name='regression',
            name='first_call',
            field=models.ForeignKey(blank=True, db_constraint=False, help_text='The first call of the streak without the baseline prefix', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='manifests.call'),
        ),
        migrations.AddIndex(
            model_name='call',
            index=models.Index(fields=['project', 'call_id'], name='call_project_call_id'),
        ),
        migrations.AddField(
            model_name='callkey',
            name='call',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='manifests.call'),
        ),
        migrations.AddField(
            model_name='callkey',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='manifests.project'),
        ),
        migrations.AddConstraint(
            model_name='callkey',
            constraint=models.UniqueConstraint(fields=('project', 'call_key'), name='callkey_unique_per_project'),
        ),
        migrations.RunPython(fill_call_keys, migrations.RunPython.noop),
        migrations.RunPython(fill_started_at_sqlite, migrations.RunPython.noop),
        migrations.RunPython(partition_tables, unpartition_tables),
    ]
