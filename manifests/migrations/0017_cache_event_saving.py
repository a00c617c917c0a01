"""Cache events carry their call's run, agent and model and what the miss cost, so the cache
view and the savings read one index instead of joining every event of a range to its call.
Existing events are filled from their calls, their saving at today's price book; the index that
covers the new columns is built by the next migration, once the rows' old versions are dead."""

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


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0016_watched_facts'),
    ]

    operations = [
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
            field=models.ForeignKey(db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.DO_NOTHING, related_name='+', to='manifests.run'),
        ),
        migrations.AddField(
            model_name='cacheevent',
            name='saving',
            field=models.FloatField(default=0.0, help_text='Cost units a hit would have saved'),
        ),
        migrations.RunPython(fill_from_calls, migrations.RunPython.noop),
    ]
