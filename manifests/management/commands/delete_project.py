from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from manifests.models import Project
from manifests.storage import retention


class Command(BaseCommand):
    help = "Delete a project and all its calls, items, evidence and rollups (set-based: seconds, not hours)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    def handle(self, *args: str, slug: str, yes: bool, **options: Any) -> None:
        project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise CommandError(f"no project with slug {slug!r}")
        if not yes:
            answer = input(f"Delete project {project.name!r} and all its data? Type its slug to confirm: ")
            if answer.strip() != slug:
                raise CommandError("not confirmed; nothing deleted")
        retention.delete_project(project=project)
        self.stdout.write(f"deleted project {slug}")
