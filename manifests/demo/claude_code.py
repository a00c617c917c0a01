"""The demo's Claude Code session, recorded by ``ctxkit proxy``: the real Claude Code CLI
(``@anthropic-ai/claude-code``, pinned in tests/clients/claude_code) over five ``claude -p`` turns with
``--continue``, against a stand-in of the Messages API (tests/proxy/claude_code_standin.py).

The session: the model has the CLI's Read tool read a note ("The refund rate is 0.0321."), two
more turns follow (the second launched with a line appended to the system prompt), then
``/compact``: the CLI asks for a summary, and the stand-in's summary leaves the refund rate out;
one more turn runs on the compacted history. Six calls, one run (the CLI's session id). The
project watches the rate (:data:`WATCHED`): the loader adds that watched fact, so the sixth call
shows it missing, lost in the compaction, whose ``required_evidence`` invariant fails.

claude_code_session.jsonl holds the manifests the proxy produced, one per line, as they were
sent; loading shifts their times so the session ends at ``now`` and stores them through
``ingest.ingest_body``, the service behind ``POST /api/v1/manifests``. To record them again
(after a change to the proxy's mapping or a new pinned CLI)::

    npm ci --prefix tests/claude_code
    PYTHONPATH=sdk:. .venv/bin/python -m tests.proxy.record_claude_code_session
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from django.utils import timezone

from manifests import ingest
from manifests.facts import FactSpec, create_fact
from manifests.models import Call, Project, WatchedFact

FIXTURE = Path(__file__).with_name("claude_code_session.jsonl")
AGENT = "claude-cli"
WATCHED = FactSpec(label="refund rate", text="The refund rate is 0.0321", agent=AGENT)


def recorded() -> list[dict[str, Any]]:
    """The recorded manifests, in step order."""
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    return sorted((json.loads(line) for line in lines if line.strip()), key=lambda m: m["step"])


def run_id() -> str:
    return str(recorded()[0]["run_id"])


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def shifted(manifests: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """``manifests`` with every time moved by the same amount, so the last call ends at ``now``."""
    last = max(_at(m.get("ended_at") or m["started_at"]) for m in manifests)
    delta = now - last
    out = []
    for manifest in manifests:
        moved = dict(manifest)
        for name in ("started_at", "ended_at"):
            if moved.get(name):
                moved[name] = (_at(moved[name]) + delta).isoformat().replace("+00:00", "Z")
        out.append(moved)
    return out


def load_claude_code_session(*, project: Project, now: datetime | None = None,
                             analyse: bool = True) -> dict[str, int]:
    """Watch :data:`WATCHED` in ``project`` and store the session there (once: a second load
    stores nothing)."""
    manifests = recorded()
    stored = Call.objects.filter(project=project, run__run_id=manifests[0]["run_id"]).count()
    if stored:
        return {"accepted": 0, "duplicates": stored}
    if not WatchedFact.objects.filter(project=project, label=WATCHED.label).exists():
        create_fact(project=project, spec=WATCHED)
    body = json.dumps({"manifests": shifted(manifests, now or timezone.now())}, ensure_ascii=False)
    report = ingest.ingest_body(project=project, body=body.encode("utf-8"))
    if analyse and report.stored_call_ids:
        from manifests import analysis

        analysis.analyze_calls(report.stored_call_ids)
    return {"accepted": report.count(ingest.ACCEPTED), "duplicates": 0}
