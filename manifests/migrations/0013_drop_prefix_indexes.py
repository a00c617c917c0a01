"""Drop the single-column foreign-key indexes of the tables only ingest writes whose column
leads a composite index already (calls: project_id, run_id; the idempotency registry:
project_id; runs: project_id): every index is paid by every row written, and a query on the
column alone uses the composite one (docs/performance.md, "Ingest").

As in 0011, by name only: Django's AlterField would also drop and re-add the foreign keys,
re-checking every stored row under a lock. Dropping a partitioned parent's index drops its
partitions' indexes with it (PostgreSQL); on SQLite the names are the same. Reversible: the
reverse creates the same indexes again.
"""

import django.db.models.deletion
from django.db import migrations, models

PREFIXES = [
    ("manifests_call_project_id_57a72005", "manifests_call", "project_id"),  # call_project_time & co.
    ("manifests_call_run_id_c5a3b0c4", "manifests_call", "run_id"),  # call_run_step
    ("manifests_callkey_project_id_b31b6d03", "manifests_callkey", "project_id"),  # callkey_unique_per_project
    ("manifests_run_project_id_6fe83299", "manifests_run", "project_id"),  # run_unique_per_project
]


class Migration(migrations.Migration):
    dependencies = [
        ("manifests", "0012_scalepages_pattern_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=f'DROP INDEX IF EXISTS "{name}"',
                    reverse_sql=f'CREATE INDEX IF NOT EXISTS "{name}" ON "{table}" ("{column}")',
                )
                for name, table, column in PREFIXES
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="call",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="calls",
                        to="manifests.project",
                    ),
                ),
                migrations.AlterField(
                    model_name="call",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="calls",
                        to="manifests.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="callkey",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="manifests.project",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="manifests.project",
                    ),
                ),
            ],
        ),
    ]
