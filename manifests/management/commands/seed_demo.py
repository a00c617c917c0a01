"""Load the demo project: a user, a project, a key, and a few realistic runs,
sent through the real ingest path (the same service the API calls)."""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from manifests import services
from manifests.demo import claude_code as demo_claude_code
from manifests.demo import imported as demo_imported
from manifests.demo import instrument as demo_instrument
from manifests.demo import otlp as demo_otlp
from manifests.demo import runs as demo
from manifests.models import Membership, Project

DEMO_USER = "demo"
DEMO_PASSWORD = "demo-password"


class Command(BaseCommand):
    help = "Create (or refresh) the demo project with several runs, and print a login and an ingest key."

    def handle(self, *args: str, **options: Any) -> None:
        User = get_user_model()
        user, created = User.objects.get_or_create(
            username=DEMO_USER, defaults={"is_staff": True, "is_superuser": True}
        )
        if created or not user.check_password(DEMO_PASSWORD):
            user.set_password(DEMO_PASSWORD)
            user.save()
        project = Project.objects.filter(slug="demo").first()
        if project is None:
            project = services.create_project(name="Demo", owner=user)
        services.add_member(project=project, user=user, role=Membership.OWNER)
        _, raw_key = services.create_api_key(project=project, name="demo", can_ingest=True, can_read=True)
        report = demo.load(project=project)
        traced = demo_otlp.load(project=project)  # the run that came in through OTLP
        instrumented = demo_instrument.load(project=project)  # the run recorded by ctxkit.instrument
        captured = demo_claude_code.load_claude_code_session(project=project)  # Claude Code via ctxkit proxy
        transcripts = demo_imported.load_imported_sessions(project=project)  # agents' transcripts via ctxkit import
        self.stdout.write(
            f"demo data: {report['accepted']} calls stored and analysed, {report['duplicates']} already there\n"
            f"OTLP run:  {traced['accepted']} calls from {traced['spans']} spans ({traced['ignored']} not inference)\n"
            f"instrument run: {instrumented['accepted']} calls recorded around the anthropic client, "
            f"{instrumented['duplicates']} already there\n"
            f"Claude Code session: {captured['accepted']} calls captured by ctxkit proxy, "
            f"{captured['duplicates']} already there\n"
            f"imported sessions: {transcripts['accepted']} calls from agents' transcripts by ctxkit import, "
            f"{transcripts['duplicates']} already there\n"
            f"\n  open     http://{os.environ.get('CTXVIEW_DEMO_HOST', '127.0.0.1:8000')}/\n"
            f"  login    {DEMO_USER} / {DEMO_PASSWORD}\n"
            f"  api key  {raw_key}   (ingest + read, project 'demo')\n"
        )
