"""The migration that copies each cache event's run, agent and model from its call and stores
what the miss cost fills the events of an existing database: the test database is migrated back
to the migration before it, an event is stored with the models of that time, and migrated
forward."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ctxkit import figures
from ctxkit.manifest import Usage
from manifests.storage import partitions
from tests.migrations.support import APP, around, migrate

pytestmark = pytest.mark.django_db(transaction=True)

WHEN = datetime(2025, 6, 7, 8, 9, tzinfo=UTC)


def test_it_fills_the_events_of_an_existing_database_from_their_calls():
    node, previous, leaves = around("_cache_event_saving")
    try:
        apps = migrate([previous]).loader.project_state(previous).apps
        partitions.ensure_days([partitions.day_of(WHEN)])  # PostgreSQL: the call's day
        project = apps.get_model(APP, "Project").objects.create(name="Legacy", slug="legacy")
        run = apps.get_model(APP, "Run").objects.create(project=project, run_id="r", first_seen=WHEN, last_seen=WHEN)
        call = apps.get_model(APP, "Call").objects.create(
            project=project, run=run, call_id="legacy-1", step=1, agent="coder", model="claude-sonnet-4-5",
            started_at=WHEN, window=200_000, input_cap=190_000, content_hash="h" * 64, raw="{}",
            prefix_hash="p" * 64, prefix_tokens=3000, input_tokens=5000, cache_read_tokens=0,
            cache_write_tokens=3000, output_tokens=200)
        apps.get_model(APP, "CacheEvent").objects.create(project=project, call=call, cause="prefix_changed",
                                                         started_at=WHEN)

        apps = migrate([node]).loader.project_state(node).apps
        event = apps.get_model(APP, "CacheEvent").objects.get(call_id=call.pk)
        assert (event.run_id, event.agent, event.model) == (run.pk, "coder", "claude-sonnet-4-5")
        # The default price row (migration-made): 1, 4, 0.1 and 1.25 units per 1k tokens.
        weights = {"input": 0.001, "output": 0.004, "cache_read": 0.0001, "cache_write": 0.00125}
        expected = figures.cache_saving(Usage(input_tokens=5000, cache_read_tokens=0, cache_write_tokens=3000,
                                              output_tokens=200), 3000, weights)
        assert expected > 0 and event.saving == pytest.approx(expected)
    finally:
        migrate(leaves)
