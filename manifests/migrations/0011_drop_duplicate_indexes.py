"""Drop the single-column indexes that duplicate the leading column of a composite one
(items: call_id, project_id; evidence: call_id twice, project_id): every index is paid by
every row written (docs/performance.md, "Ingest").

The indexes are dropped by name only: Django's AlterField would also drop and re-add the
project foreign keys, which re-checks every stored row under a lock. Dropping a partitioned
parent's index drops its partitions' indexes with it (PostgreSQL); on SQLite the names are
the same.
"""

import django.db.models.deletion
from django.db import migrations, models


DUPLICATES = [
    ("manifests_evidence_call_id_bbf03fac", "manifests_evidence", "call_id"),
    ("manifests_evidence_project_id_b7663f9f", "manifests_evidence", "project_id"),
    ("manifests_item_call_id_198a80cd", "manifests_item", "call_id"),
    ("manifests_item_project_id_a1d12927", "manifests_item", "project_id"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("manifests", "0010_rollup_marks"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{name}"',
                    reverse_sql=f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("{column}")',
                )
                for name, table, column in DUPLICATES
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="evidence",
                    name="call",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="evidence",
                        to="manifests.call",
                    ),
                ),
                migrations.AlterField(
                    model_name="evidence",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="manifests.project",
                    ),
                ),
                migrations.AlterField(
                    model_name="item",
                    name="call",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="items",
                        to="manifests.call",
                    ),
                ),
                migrations.AlterField(
                    model_name="item",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="manifests.project",
                    ),
                ),
            ],
        ),
    ]
