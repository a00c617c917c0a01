"""The demo's imported sessions: the transcripts real agent CLIs wrote to disk, read by
``ctxkit import``'s own readers, as an engineer's existing sessions arrive with one command.

``transcripts/<source>/`` holds the files as each CLI wrote them (``<source>`` a name of
``ctxkit.importer.sessions.SOURCES``: ``claude-code``, ``codex``, ``gemini``), recorded by the real
CLIs (pinned in tests/clients) against the test stand-ins, whose usage counts the request's input.
Loading reads them through ``import_transcripts`` (the proxy's mapping, so the items are those a
live capture gives), moves every time by one amount so the last call ends at ``now``, and stores
the manifests through ``ingest.ingest_body``, the service behind ``POST /api/v1/manifests``. A
call's id is its provider response id, so a second load stores nothing. To record them again::

    make node-clients
    PYTHONPATH=sdk:. .venv/bin/python -m tests.importer.record_demo_transcripts
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
from django.conf import settings
from django.utils import timezone

from ctxkit.importer.sessions import SOURCES, import_transcripts
from ctxkit.manifest import Manifest
from manifests import ingest
from manifests.demo.claude_code import shifted
from manifests.models import Project

TRANSCRIPTS = Path(__file__).with_name("transcripts")


class _Kept:
    """The importer's sink: the manifests it builds, kept in order."""

    def __init__(self) -> None:
        self.manifests: list[dict[str, Any]] = []

    def capture(self, manifest: Manifest) -> None:
        self.manifests.append(msgspec.to_builtins(manifest))


def imported() -> dict[str, list[dict[str, Any]]]:
    """The manifests of each source's recorded transcripts, by source name."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, source in SOURCES.items():
        folder = TRANSCRIPTS / name
        if folder.is_dir():
            kept = _Kept()
            import_transcripts(source, str(folder), kept)
            out[name] = kept.manifests
    return out


def load_imported_sessions(*, project: Project, now: datetime | None = None,
                           analyse: bool = True) -> dict[str, int]:
    """Store every recorded session in ``project``; counts of calls accepted and already there."""
    manifests = [m for kept in imported().values() for m in kept]
    if not manifests:
        return {"accepted": 0, "duplicates": 0}
    moved = shifted(manifests, now or timezone.now())
    accepted = duplicates = 0
    for start in range(0, len(moved), settings.CTXVIEW_MAX_BATCH):
        body = json.dumps({"manifests": moved[start:start + settings.CTXVIEW_MAX_BATCH]}, ensure_ascii=False)
        report = ingest.ingest_body(project=project, body=body.encode("utf-8"))
        accepted += report.count(ingest.ACCEPTED)
        duplicates += report.count(ingest.DUPLICATE)
        if analyse and report.stored_call_ids:
            from manifests import analysis

            analysis.analyze_calls(report.stored_call_ids)
    return {"accepted": accepted, "duplicates": duplicates}
