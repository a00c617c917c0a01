from __future__ import annotations

from django.core.management.base import BaseCommand

from manifests import analysis
from manifests.management.selection import add_selection, selected_calls


class Command(BaseCommand):
    help = ("Analyse stored calls again (figures, attributions, cache events, regressions, rollups) after a "
            "change of rules: every call of the selection, analysed or not. Safe to run again: what was "
            "derived from a call is replaced, never added to. Webhooks of regressions it finds are left to "
            "the notification sweep.")

    def add_arguments(self, parser):
        add_selection(parser, calls=True)
        parser.add_argument("--batch", type=int, default=500, help="calls per batch (each in chunks of "
                            "CTXVIEW_ANALYSIS_CHUNK, one transaction each)")

    def handle(self, *args, batch: int, **options):
        ids = list(selected_calls(options).order_by("pk").values_list("pk", flat=True))
        done = 0
        for start in range(0, len(ids), max(1, batch)):
            done += analysis.analyze_calls(ids[start : start + batch], force=True)
        self.stdout.write(f"{done} of {len(ids)} calls analysed again")
