from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from manifests.models import Project
from manifests.storage import retention


class Command(BaseCommand):
    help = "Expire raw calls past each project's retention and rollups past theirs (what the daily task runs)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", help="slug of one project (default: every project)")

    def handle(self, *args: str, project: str | None, **options: Any) -> None:
        if project:
            found = Project.objects.filter(slug=project).first()
            if found is None:
                raise CommandError(f"no project with slug {project!r}")
            expired = retention.expire_project(project=found)
        else:
            expired = retention.enforce_retention()
        self.stdout.write(", ".join(f"{count} {what}" for what, count in expired.items()) + " expired")
