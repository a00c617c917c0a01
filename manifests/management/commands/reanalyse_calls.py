"""Re-analyse stored calls: after a fix, the quarantined ones (``--quarantined``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from manifests import analysis
from manifests.models import Call


class Command(BaseCommand):
    help = (
        "Re-analyse stored calls in this process. --quarantined: the calls whose analysis failed on "
        "their own (docs/analysis.md, 'Poison calls'); run it after fixing the cause. A call that "
        "fails again stays quarantined with its new error."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--quarantined", action="store_true", help="re-analyse every quarantined call (of --project, if given)"
        )
        parser.add_argument("--project", help="only the calls of the project with this slug")

    def handle(self, *args: Any, quarantined: bool, project: str | None, **options: Any) -> None:
        if not quarantined:
            raise CommandError("say which calls to re-analyse: --quarantined")
        calls = Call.objects.filter(quarantined_at__isnull=False)
        if project:
            calls = calls.filter(project__slug=project)
        ids = list(calls.order_by("pk").values_list("pk", flat=True))
        if not ids:
            self.stdout.write("no quarantined calls")
            return
        # force: a quarantined call may have been analysed before (a forced re-analysis
        # that failed); everything derived from it is replaced.
        done = analysis.analyze_calls(ids, force=True)
        still = Call.objects.filter(pk__in=ids, quarantined_at__isnull=False)
        self.stdout.write(f"re-analysed {done} of {len(ids)} quarantined calls; {still.count()} still quarantined")
        for call_id, error in still.values_list("call_id", "analysis_error")[:20]:
            self.stdout.write(f"  {call_id}: {error}")
