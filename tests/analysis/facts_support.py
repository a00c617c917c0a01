"""Runs for the watched-fact tests: calls with item text, sent through the real ingest API."""

from __future__ import annotations

from typing import Any

from manifests import facts, tasks
from manifests.models import Call, WatchedFact
from tests.support import manifest

FACT = "deploy only to staging-eu-2"
SYSTEM = {"id": "system", "kind": "system", "action": "keep", "requested_tokens": 50, "used_tokens": 50,
          "text": "You are a careful release engineer."}


def text_item(item_id: str, text: str, *, kind: str = "history", action: str = "keep", tokens: int = 200,
              **extra: Any) -> dict:
    used = 0 if action in ("drop", "dedupe", "clear") else tokens
    return {"id": item_id, "kind": kind, "action": action, "requested_tokens": tokens, "used_tokens": used,
            "text": text, **extra}


def step(n: int, items: list[dict], *, run_id: str = "run-f", compactions: list[dict] | None = None) -> dict:
    m = manifest(f"{run_id}-{n}", run_id=run_id, step=n, items=0, evidence=[], compactions=compactions or [])
    m["items"] = [SYSTEM, *items]
    return m


def send(api, django_capture_on_commit_callbacks, manifests: list[dict]) -> list[Call]:
    """Post the manifests through the ingest API, then analyse them as the worker does: the
    analysis runs after the commit without a broker; with one (CI's PostgreSQL run) it is
    enqueued for a worker this test does not start, so the task body runs here (a no-op for
    calls analysed already)."""
    with django_capture_on_commit_callbacks(execute=True):
        r = api.post({"manifests": manifests})
    assert r.status_code == 200, r.content
    assert [x["status"] for x in r.json()["results"]] == ["accepted"] * len(manifests)
    tasks.analyze_calls(list(Call.objects.filter(call_id__in=[m["call_id"] for m in manifests])
                             .values_list("pk", flat=True)))
    calls = {c.call_id: c for c in Call.objects.filter(call_id__in=[m["call_id"] for m in manifests])}
    assert all(c.analyzed_at is not None for c in calls.values())
    return [calls[m["call_id"]] for m in manifests]


def watch(project, label: str = "deploy-target", text: str = FACT, **kw: Any) -> WatchedFact:
    return facts.create_fact(project=project, spec=facts.parse_fact({"label": label, "text": text, **kw}))


def compacted_run(run_id: str = "run-f") -> list[dict]:
    """Steps 0 and 1 hold the fact in a turn; step 2 comes after a compaction (the agent
    summarized its history) whose summary does not hold it."""
    turn = text_item("turn-1", f"User: remember to {FACT}, never prod.")
    summary = text_item("summary-2", "Summary: the user asked for a release of the billing service.", kind="summary")
    compaction = {"id": "cmp-2", "strategy": "summary", "trigger": "auto", "tokens_before": 3000,
                  "tokens_after": 400, "summary_item": "summary-2"}
    return [step(0, [turn], run_id=run_id),
            step(1, [turn, text_item("turn-2", "Assistant: building.")], run_id=run_id),
            step(2, [summary, text_item("turn-3", "User: go on.")], run_id=run_id, compactions=[compaction])]
