"""Analyse stored calls again: after a change of rules or of a project's watched facts (a
selection: ``--project SLUG`` applies the project's facts to its past calls), or after a fix,
the quarantined ones (``--quarantined``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from manifests import analysis
from manifests.management.selection import add_selection, selected_calls
from manifests.models import Call


class Command(BaseCommand):
    help = ("Analyse stored calls again (figures, attributions, watched facts, cache events, regressions, "
            "rollups) after a change of rules, or of a project's watched facts (--project SLUG applies them to "
            "its past calls): every call of the selection, analysed or not. Safe to run again: what was "
            "derived from a call is replaced, never added to. Webhooks of regressions it finds are left to "
            "the notification sweep. --quarantined: only the calls whose analysis failed on their own "
            "(docs/analysis.md, 'Poison calls'); run it after fixing the cause. A call that fails again "
            "stays quarantined with its new error.")

    def add_arguments(self, parser: Any) -> None:
        add_selection(parser, calls=True)
        parser.add_argument("--quarantined", action="store_true",
                            help="only the quarantined calls of the selection")
        parser.add_argument("--batch", type=int, default=500, help="calls per batch (each in chunks of "
                            "CTXVIEW_ANALYSIS_CHUNK, one transaction each)")

    def handle(self, *args: Any, batch: int, quarantined: bool, **options: Any) -> None:
        calls = selected_calls(options)
        if quarantined:
            calls = calls.filter(quarantined_at__isnull=False)
        ids = list(calls.order_by("pk").values_list("pk", flat=True))
        if quarantined and not ids:
            self.stdout.write("no quarantined calls")
            return
        done = 0
        for start in range(0, len(ids), max(1, batch)):
            # force: a quarantined call may have been analysed before; what was derived is replaced.
            done += analysis.analyze_calls(ids[start : start + batch], force=True)
        if not quarantined:
            self.stdout.write(f"{done} of {len(ids)} calls analysed again")
            return
        still = Call.objects.filter(pk__in=ids, quarantined_at__isnull=False)
        self.stdout.write(f"re-analysed {done} of {len(ids)} quarantined calls; {still.count()} still quarantined")
        for call_id, error in still.values_list("call_id", "analysis_error")[:20]:
            self.stdout.write(f"  {call_id}: {error}")
