"""Watched facts (manifests/facts.py) and the flag of the evidence and invariant rows the
analysis derives from them.

WatchedFact is a plain table on both databases (a project has a handful). The two flags
have a database default (false), so adding them to the partitioned evidence and invariant
tables rewrites no stored row, and ingest's COPY, which names its columns, needs no change.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0015_figure_sort_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='evidence',
            name='watched',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddField(
            model_name='invariant',
            name='watched',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.CreateModel(
            name='WatchedFact',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('label', models.CharField(help_text='A short name, unique in the project', max_length=100)),
                ('text', models.TextField(help_text='The exact text, or a regular expression when is_regex')),
                ('is_regex', models.BooleanField(default=False)),
                ('agent', models.CharField(blank=True, help_text='Only this agent; empty: every agent', max_length=200)),
                ('created', models.DateTimeField(default=django.utils.timezone.now)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='watched_facts', to='manifests.project')),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('project', 'label'), name='watchedfact_unique_label')],
            },
        ),
    ]
