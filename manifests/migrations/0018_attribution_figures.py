"""Attributions carry their call's run, agent and model, and the call's cost on its first
attribution of each cause, so the savings of missing evidence read one index instead of
joining every attribution of the seven days to its call. Existing attributions are filled
from their calls and the calls' stored figures; the index that covers them is built by the
next migration, once the rows' old versions are committed dead and need no entries."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery, Value
from django.db.models.functions import Coalesce


def fill_from_calls(apps, schema_editor):
    Attribution = apps.get_model("manifests", "Attribution")
    Call = apps.get_model("manifests", "Call")
    CallFigures = apps.get_model("manifests", "CallFigures")
    if not Attribution.objects.exists():
        return
    call = Call.objects.filter(pk=OuterRef("call_id"), started_at=OuterRef("started_at"))
    cost = CallFigures.objects.filter(call_id=OuterRef("call_id")).values("cost")[:1]
    Attribution.objects.update(run_id=Subquery(call.values("run_id")[:1]), agent=Subquery(call.values("agent")[:1]),
                               model=Subquery(call.values("model")[:1]))
    # The analysis stores its attributions of a call in order: the first of each cause has
    # the lowest primary key of that call and cause.
    firsts = Attribution.objects.values("call_id", "cause").annotate(first=models.Min("pk")).values("first")
    Attribution.objects.filter(pk__in=Subquery(firsts)).update(
        call_cost=Coalesce(Subquery(cost), Value(0.0), output_field=models.FloatField()))
    if schema_editor.connection.vendor == "postgresql":
        # The updates left deferred foreign-key checks pending, and PostgreSQL builds no index
        # (the run's, deferred to the end of the migration) on a table with pending trigger
        # events in the same transaction.
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0017_cache_event_saving'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='attribution',
            name='attribution_project_cause',
        ),
        migrations.AddField(
            model_name='attribution',
            name='agent',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.AddField(
            model_name='attribution',
            name='call_cost',
            field=models.FloatField(blank=True, help_text="The call's cost on its first attribution of this cause, else null", null=True),
        ),
        migrations.AddField(
            model_name='attribution',
            name='model',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.AddField(
            model_name='attribution',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='manifests.run'),
        ),
        migrations.RunPython(fill_from_calls, migrations.RunPython.noop),
    ]
