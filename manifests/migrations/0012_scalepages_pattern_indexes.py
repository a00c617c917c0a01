"""The search box's prefix lookups (call id, evidence key: ``LIKE 'x%'``) read an index under
any collation: the (project, call_id) and (project, key) indexes are rebuilt with the pattern
operator class (PostgreSQL; a plain b-tree serves LIKE only under the "C" collation, and
"C.UTF-8" is not that on PostgreSQL 15). Equality lookups use them as before. On a
partitioned parent, CREATE INDEX builds the index on every partition. SQLite ignores
operator classes: there the indexes stay as they were.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("manifests", "0011_drop_duplicate_indexes"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="call", name="call_project_call_id"),
        migrations.AddIndex(
            model_name="call",
            index=models.Index(fields=["project", "call_id"], name="call_project_call_id",
                               opclasses=["int8_ops", "varchar_pattern_ops"]),
        ),
        migrations.RemoveIndex(model_name="evidence", name="evidence_project_key"),
        migrations.AddIndex(
            model_name="evidence",
            index=models.Index(fields=["project", "key"], name="evidence_project_key",
                               opclasses=["int8_ops", "varchar_pattern_ops"]),
        ),
    ]
