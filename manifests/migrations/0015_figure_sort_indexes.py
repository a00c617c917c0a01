from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('manifests', '0014_alert_rules'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='callfigures',
            index=models.Index(fields=['project', 'cache_hit_ratio', 'call'], include=('started_at',), name='figures_project_hit'),
        ),
        migrations.AddIndex(
            model_name='callfigures',
            index=models.Index(fields=['project', 'cost', 'call'], include=('started_at',), name='figures_project_cost'),
        ),
    ]
