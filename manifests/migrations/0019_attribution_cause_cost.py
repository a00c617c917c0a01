"""The index that serves the savings of missing evidence, built after 0018 filled the
attributions: a separate migration, so it is built once the rows' old versions are dead
(committed) and holds entries for the live rows only."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0018_attribution_figures'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='attribution',
            index=models.Index(fields=['project', 'cause', 'started_at'], include=('call', 'run', 'agent', 'model', 'call_cost', 'evidence_key'), name='attribution_cause_cost'),
        ),
    ]
