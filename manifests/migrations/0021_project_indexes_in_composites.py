"""The attributions and cache events keep no index on the project alone: their composite indexes
lead with it (deleting a project uses them), and a lone one led the planner to read every
attribution of a project for a week's."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0020_cache_event_index'),
    ]

    operations = [
        migrations.AlterField(
            model_name='attribution',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='manifests.project'),
        ),
        migrations.AlterField(
            model_name='cacheevent',
            name='project',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='manifests.project'),
        ),
    ]
