"""The migration that copies each attribution's run, agent and model from its call and stores
the call's cost on its first attribution of each cause fills the attributions of an existing
database: the test database is migrated back to the migration before it, a call with its
figures and attributions is stored with the models of that time, and migrated forward."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from manifests.storage import partitions
from tests.migrations.support import APP, around, migrate

pytestmark = pytest.mark.django_db(transaction=True)

WHEN = datetime(2025, 6, 7, 8, 9, tzinfo=UTC)


def test_it_fills_the_attributions_of_an_existing_database_from_their_calls():
    node, previous, leaves = around("_attribution_figures")
    try:
        apps = migrate([previous]).loader.project_state(previous).apps
        partitions.ensure_days([partitions.day_of(WHEN)])  # PostgreSQL: the calls' day
        project = apps.get_model(APP, "Project").objects.create(name="Legacy", slug="legacy")
        run = apps.get_model(APP, "Run").objects.create(project=project, run_id="r", first_seen=WHEN, last_seen=WHEN)
        Call = apps.get_model(APP, "Call")
        Attribution = apps.get_model(APP, "Attribution")
        calls = []
        made = [("coder", "claude-sonnet-4-5", 2.5), ("planner", "gpt-5-mini", 0.75)]
        for n, (agent, model, cost) in enumerate(made):
            call = Call.objects.create(
                project=project, run=run, call_id=f"legacy-{n}", step=n, agent=agent, model=model, started_at=WHEN,
                window=200_000, input_cap=190_000, content_hash=f"{n}" * 64, raw="{}", input_tokens=5000)
            apps.get_model(APP, "CallFigures").objects.create(call=call, project=project, started_at=WHEN, cost=cost)
            calls.append(call)
        # Two losses of one cause and one of another on the first call; one on the second.
        for call, key, cause in [(calls[0], "a", "budget"), (calls[0], "b", "budget"),
                                 (calls[0], "c", "never_candidate"), (calls[1], "a", "budget")]:
            Attribution.objects.create(project=project, call=call, evidence_key=key, cause=cause, fix="f",
                                       started_at=WHEN)

        apps = migrate([node]).loader.project_state(node).apps
        rows = apps.get_model(APP, "Attribution").objects.order_by("pk")
        assert [(r.call_id, r.evidence_key, r.run_id, r.agent, r.model, r.call_cost) for r in rows] == [
            (calls[0].pk, "a", run.pk, "coder", "claude-sonnet-4-5", 2.5),
            (calls[0].pk, "b", run.pk, "coder", "claude-sonnet-4-5", None),
            (calls[0].pk, "c", run.pk, "coder", "claude-sonnet-4-5", 2.5),
            (calls[1].pk, "a", run.pk, "planner", "gpt-5-mini", 0.75),
        ]
    finally:
        migrate(leaves)
