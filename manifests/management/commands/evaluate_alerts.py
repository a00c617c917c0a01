from django.core.management.base import BaseCommand

from manifests import tasks


class Command(BaseCommand):
    help = ("Evaluate every alert rule and deliver the new events (what the beat runs every minute; "
            "without Redis no beat runs, so schedule this command instead).")

    def handle(self, *args, **options):
        new = tasks.evaluate_alert_rules.apply().get()
        self.stdout.write(f"{new} alert events (rules that started or stopped holding)")
