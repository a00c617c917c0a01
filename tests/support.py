"""Helpers shared by the tests of several parts: storing manifests and analysing them as the
worker does, and a real HTTP server that receives webhooks. Manifests as an agent sends them
come from ``make_manifest`` (tests/conftest.py); built through ctxkit's own builder, from
tests/analysis/support.py."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ctxkit.manifest import Manifest
from manifests.ingest import ingest_body
from manifests.models import Call, Project


def as_dict(m: Manifest | dict) -> dict:
    return m if isinstance(m, dict) else msgspec.to_builtins(m)


def store(project: Project, manifests: Iterable[Manifest | dict]) -> list[Call]:
    """Store manifests through the ingest service; returns their calls in the same order."""
    bodies = [as_dict(m) for m in manifests]
    report = ingest_body(project=project, body=json.dumps({"manifests": bodies}).encode())
    statuses = [r.status for r in report.results]
    assert statuses == ["accepted"] * len(bodies), report.to_dict()
    by_id = {c.call_id: c for c in Call.objects.filter(project=project, call_id__in=[b["call_id"] for b in bodies])}
    return [by_id[b["call_id"]] for b in bodies]


def store_and_analyse(project: Project, manifests: Iterable[Manifest | dict]) -> list[Call]:
    """Store, then analyse as the worker does (the task body, which also enqueues webhooks and
    alert deliveries); returns the calls, read again, in the order given."""
    from manifests import tasks

    calls = store(project, manifests)
    tasks.analyze_calls([c.pk for c in calls])
    return [Call.objects.get(pk=c.pk) for c in calls]


class Receiver:
    """A real HTTP server on a free local port that records each POST's headers and body and
    answers with the statuses it is given, in order (then 200)."""

    def __init__(self, statuses: Sequence[int] = ()) -> None:
        self.statuses = list(statuses)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/ctxview"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
