"""Items carry a label: what the agent calls them (a tool by its name, a message by role and
turn), from ctxkit.record.labels; null for manifests recorded before, or built by hand."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0022_usd_costs'),
    ]

    operations = [
        migrations.AddField(
            model_name='item',
            name='label',
            field=models.CharField(blank=True, help_text='What the agent calls it: a tool by its name, a message by role and turn', max_length=200, null=True),
        ),
    ]
