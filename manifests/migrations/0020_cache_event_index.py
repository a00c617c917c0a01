"""The index that serves the cache view and the savings of cache misses, built after 0017 filled
the events: a separate migration, so it is built once the rows' old versions are dead (committed)
and holds entries for the live rows only."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0019_attribution_cause_cost'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='cacheevent',
            name='cacheevent_project_cause',
        ),
        migrations.AddIndex(
            model_name='cacheevent',
            index=models.Index(fields=['project', 'cause', 'started_at'], include=('run', 'agent', 'model', 'saving'), name='cacheevent_cause_saving'),
        ),
    ]
