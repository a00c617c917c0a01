"""Helpers shared by the tests of several parts: the one manifest builder, storing manifests
and analysing them as the worker does, and a real HTTP server that receives webhooks."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from ctxkit.manifest import Evidence, Item, Manifest, Outcome
from ctxkit.record.assemble import build_manifest
from manifests.ingest import ingest_body
from manifests.models import Call, Project

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5"

# A bare call's fields: no prefix, evidence, compaction, context edit or outcome; 2,000 tokens
# in, none from the cache, 100 out; the window alone as budget.
_BARE: dict[str, Any] = {
    "agent": "analyst", "provider": None, "prefix": None, "evidence": [], "compactions": [], "context_edits": None,
    "outcome": None, "budget": {"window": 8000}, "usage": {"input_tokens": 2000, "output_tokens": 100},
}


def manifest(
    call_id: str = "call-1", *, run_id: str = "run-1", step: int = 0, items: int | Sequence[Item] | None = None,
    bare: bool = False, seconds: float | None = None, **fields: Any,
) -> dict[str, Any]:
    """One call's v1 manifest as a plain dict, the JSON an agent sends; not checked, so a test
    can make it invalid on purpose.

    A sample call: ``items`` items (3 unless given) of every kind, action and zone, evidence
    expected in ``item-0``, a failed compaction, a context edit, a prefix and an outcome.
    ``bare``: none of them (no items unless given), 2,000 tokens in (none from the cache) and
    100 out, the window alone as budget, agent ``analyst``. It starts ``seconds`` after ``T0``
    (default: one a step). ``fields`` replace top-level fields, as JSON or as ctxkit's structs
    (a datetime as ISO 8601); ``None`` leaves a field out. ``items`` given as ctxkit Items are
    placed as ctxkit's builder places them (in context order, none for what was not sent),
    clipped, and the evidence is checked against them, as an agent using ctxkit sends them.
    """
    if items is None:
        items = [] if bare else 3
    call: dict[str, Any] = {
        "schema": "ctxview.manifest/v1",
        "call_id": call_id,
        "run_id": run_id,
        "step": step,
        "agent": "researcher",
        "model": MODEL,
        "provider": "anthropic",
        "started_at": (T0 + timedelta(seconds=step if seconds is None else seconds)).isoformat(),
        "builder": {"name": "ctxkit", "version": "0.1.0"},
        "budget": {"window": 8000, "output_reserve": 1000, "safety_margin": 200},
        "prefix": {
            "hash": "a" * 64,
            "tokens": 700,
            "segments": [
                {"name": "system", "hash": "b" * 64, "tokens": 300},
                {"name": "tools", "hash": "c" * 64, "tokens": 400},
            ],
        },
        "usage": {"input_tokens": 2000, "cache_read_tokens": 700, "cache_write_tokens": 0, "output_tokens": 150},
        "items": _sample_items(items) if isinstance(items, int) else [],
        "evidence": [{"key": "rate-limit", "label": "429", "present": False, "expected_item": "item-0"}]
        if items
        else [],
        "compactions": [
            {
                "id": "cmp-1",
                "strategy": "summary",
                "tokens_before": 5000,
                "tokens_after": 1200,
                "invariants": [
                    {
                        "name": "user_constraints",
                        "ok": False,
                        "detail": "lost 'test env only'",
                        "lost": ["test env only"],
                    },
                    {"name": "required_evidence", "ok": True},
                ],
            }
        ],
        "context_edits": [{"type": "clear_tool_uses", "cleared_count": 2, "cleared_tokens": 900, "kept": 3}],
        "outcome": {"status": "ok", "finish_reason": "end_turn", "verified": "yes"},
    }
    for name, value in ({**_BARE, **fields} if bare else fields).items():
        if value is None:
            call.pop(name, None)
        else:
            call[name] = value.isoformat() if isinstance(value, datetime) else msgspec.to_builtins(value)
    if not isinstance(items, int):
        # ctxkit's builder places, clips and checks them; its items, evidence and warnings are
        # what it would send (the rest of what it builds is not used).
        built = build_manifest(
            call_id=call_id, run_id=run_id, step=step, model=MODEL, started_at=T0, window=8000, extra_items=items,
            readback=msgspec.convert(call.get("evidence", []), list[Evidence]),
            outcome=msgspec.convert(call["outcome"], Outcome) if "outcome" in call else None, validate=False,
        )
        placed = as_dict(built)
        call["items"], call["evidence"] = placed.get("items", []), placed.get("evidence", [])
        if built.warnings:
            call["warnings"] = [*call.get("warnings", []), *built.warnings]
    return call


def _sample_items(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"item-{n}",
            "kind": ["system", "tools", "task", "history", "tool_result", "retrieval"][n % 6],
            "action": ["keep", "keep", "keep", "summarize", "truncate", "drop"][n % 6],
            "requested_tokens": 100 + n,
            "granted_tokens": 90 + n,
            "used_tokens": 80 + n,
            "priority": n % 10,
            "zone": ["head", "middle", "tail"][n % 3],
            "position": n,
            "reason": f"reason {n}",
            "content_hash": f"{n:064x}",
            "trust": "untrusted" if n % 6 == 4 else "trusted",
        }
        for n in range(count)
    ]


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


def analyse_waiting() -> None:
    """Analyse every stored call not analysed yet, as the worker does. Without a broker the
    server analyses a batch once its transaction commits; with one (CI's PostgreSQL run) the
    analysis waits for a worker that a live-server test does not start, so the task body runs
    here (calls analysed already are left alone)."""
    from manifests import tasks

    tasks.analyze_calls(list(Call.objects.filter(analyzed_at__isnull=True).values_list("pk", flat=True)))


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
