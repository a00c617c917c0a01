"""Alert rules and their events (manifests/alerts/), and the API keys' settings scope.

New plain tables on both databases (not partitioned: a project has a handful of rules);
the new key column has a constant default, so adding it rewrites no stored key.
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0013_drop_prefix_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='apikey',
            name='can_configure',
            field=models.BooleanField(default=False),
        ),
        migrations.CreateModel(
            name='AlertRule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('hit_rate_below', 'Cache hit rate below'), ('invariant_failures', 'Compaction invariant failures above'), ('evidence_lost', 'Required evidence lost more than'), ('cost_per_success_above', 'Cost per verified success above')], max_length=32)),
                ('agent', models.CharField(blank=True, help_text='Only this agent; empty: every agent', max_length=200)),
                ('model', models.CharField(blank=True, help_text='Only this model; empty: every model', max_length=200)),
                ('evidence_key', models.CharField(blank=True, help_text='evidence_lost only: the watched key; empty: any required evidence', max_length=200)),
                ('threshold', models.FloatField(help_text='A hit rate (0..1), a count, or cost units, by kind')),
                ('window_hours', models.PositiveIntegerField(default=1)),
                ('format', models.CharField(choices=[('auto', "Auto (by the webhook's host)"), ('json', 'JSON'), ('slack', 'Slack'), ('discord', 'Discord')], default='auto', max_length=16)),
                ('created', models.DateTimeField(default=django.utils.timezone.now)),
                ('firing', models.BooleanField(default=False)),
                ('episode', models.PositiveIntegerField(default=0, help_text='Episodes started so far; the current one if firing')),
                ('changed_at', models.DateTimeField(blank=True, help_text='When firing last changed', null=True)),
                ('last_value', models.FloatField(blank=True, help_text='The figure at the last evaluation', null=True)),
                ('evaluated_at', models.DateTimeField(blank=True, null=True)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='alert_rules', to='manifests.project')),
            ],
        ),
        migrations.CreateModel(
            name='AlertEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('episode', models.PositiveIntegerField()),
                ('transition', models.CharField(choices=[('firing', 'Firing'), ('resolved', 'Resolved')], max_length=16)),
                ('at', models.DateTimeField(help_text='The evaluation that saw the change')),
                ('value', models.FloatField(blank=True, null=True)),
                ('summary', models.TextField(help_text='The change in a sentence')),
                ('notified_at', models.DateTimeField(blank=True, null=True)),
                ('notify_attempts', models.PositiveIntegerField(default=0)),
                ('last_notify_attempt', models.DateTimeField(blank=True, null=True)),
                ('notify_error', models.TextField(blank=True)),
                ('project', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='manifests.project')),
                ('rule', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='manifests.alertrule')),
            ],
            options={
                'indexes': [models.Index(fields=['notified_at', 'notify_attempts'], name='alertevent_unsent')],
                'constraints': [models.UniqueConstraint(fields=('rule', 'episode', 'transition'), name='alertevent_unique_transition')],
            },
        ),
    ]
