from typing import Any

from django.core.management.base import BaseCommand

from manifests import alerts, tasks


class Command(BaseCommand):
    help = ("Evaluate every alert rule and deliver the new events in this process (what the beat runs "
            "every minute; without Redis no beat runs, so schedule this command instead).")

    def handle(self, *args: str, **options: Any) -> None:
        new = alerts.evaluate_all()
        # Delivered here, not through the broker: the command must work where no worker runs.
        for pk in alerts.to_deliver(new):
            tasks.notify_alert.apply(args=[pk])
        self.stdout.write(f"{len(new)} alert events (rules that started or stopped holding)")
