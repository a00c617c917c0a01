from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db.models import Max, Min
from django.utils import timezone

from manifests.analysis import rollups
from manifests.management.selection import add_selection, projects, time_range
from manifests.models import Call, Rollup


class Command(BaseCommand):
    help = ("Recompute the hourly and daily rollups of a project and time range from the stored, analysed "
            "calls (after a change of rules, or for data loaded in bulk); buckets left without calls are "
            "deleted. Safe to run again: rollups are overwritten, never added to.")

    def add_arguments(self, parser: CommandParser) -> None:
        add_selection(parser, calls=False)

    def handle(self, *args: str, **options: Any) -> None:
        since, until = time_range(options)
        total = 0
        for project in projects(options["project"]):
            start, end = since, until
            if start is None or end is None:  # default: everything the project has
                calls = Call.objects.filter(project=project).aggregate(first=Min("started_at"), last=Max("started_at"))
                stored = Rollup.objects.filter(project=project).aggregate(first=Min("start"), last=Max("start"))
                firsts = [t for t in (calls["first"], stored["first"]) if t is not None]
                lasts = [t for t in (calls["last"], stored["last"]) if t is not None]
                if not firsts:
                    self.stdout.write(f"{project.slug}: no calls, nothing to rebuild")
                    continue
                start = start or min(firsts)
                end = end or max(lasts) + timedelta(days=1)
            written = rollups.rebuild(project_id=project.pk, start=start, end=end)
            total += written
            self.stdout.write(f"{project.slug}: {written} rollup buckets recomputed "
                              f"({start.isoformat()} to {end.isoformat()})")
        self.stdout.write(f"done: {total} buckets at {timezone.now().isoformat(timespec='seconds')}")
