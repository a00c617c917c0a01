from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from manifests import services


class Command(BaseCommand):
    help = "Create a project and print an API key for it (shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--owner", help="username of an existing user to make the project's owner")
        parser.add_argument("--read", action="store_true", help="the key may also read (GET /api/v1/...)")

    def handle(self, *args: str, name: str, owner: str | None, read: bool, **options: Any) -> None:
        user = None
        if owner:
            user = get_user_model().objects.filter(username=owner).first()
            if user is None:
                raise CommandError(f"no user named {owner!r}; create one with `manage.py createsuperuser`")
        project = services.create_project(name=name, owner=user)
        _, raw = services.create_api_key(project=project, name="default", can_ingest=True, can_read=read)
        self.stdout.write(f"project: {project.name} (slug {project.slug})")
        self.stdout.write(f"api key: {raw}")
        self.stdout.write("The key is shown once; only its hash is stored.")
