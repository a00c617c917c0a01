"""Cache events carry their call's run, agent and model and what the miss cost, so the cache
view and the savings read one index instead of joining every event of a range to its call.
Existing events are filled from their calls, their saving at today's price book."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill_from_calls(apps, schema_editor):
    from manifests import figures
    from manifests.analysis.prices import PriceBook

    CacheEvent = apps.get_model("manifests", "CacheEvent")
    Call = apps.get_model("manifests", "Call")
    if not CacheEvent.objects.exists():
        return
    call = Call.objects.filter(pk=OuterRef("call_id"), started_at=OuterRef("started_at"))
    CacheEvent.objects.update(run_id=Subquery(call.values("run_id")[:1]), agent=Subquery(call.values("agent")[:1]),
                              model=Subquery(call.values("model")[:1]))
    book = PriceBook.load(apps.get_model("manifests", "ModelPrice"))
    for model in CacheEvent.objects.values_list("model", flat=True).distinct():
        saving = call.annotate(saving=figures.cache_saving("", book.for_model(model).weights)).values("saving")[:1]
        CacheEvent.objects.filter(model=model).update(saving=Subquery(saving))
    if schema_editor.connection.vendor == "postgresql":
        # The updates left deferred foreign-key checks pending, and PostgreSQL builds no index
        # on a table with pending trigger events in the same transaction.
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0016_watched_facts'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='cacheevent',
            name='cacheevent_project_cause',
        ),
        migrations.AddField(
            model_name='cacheevent',
            name='agent',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.AddField(
            model_name='cacheevent',
            name='model',
            field=models.CharField(blank=True, default='', max_length=200),
        ),
        migrations.AddField(
            model_name='cacheevent',
            name='run',
            field=models.ForeignKey(db_constraint=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='manifests.run'),
        ),
        migrations.AddField(
            model_name='cacheevent',
            name='saving',
            field=models.FloatField(default=0.0, help_text='Cost units a hit would have saved'),
        ),
        migrations.RunPython(fill_from_calls, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name='cacheevent',
            index=models.Index(fields=['project', 'cause', 'started_at'], include=('run', 'agent', 'model', 'saving'), name='cacheevent_cause_saving'),
        ),
    ]
