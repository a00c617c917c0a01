"""``manage.py seed_demo``: the demo project with every run the demo holds, stored once however
often the command runs. The command runs twice per module (it costs seconds), committed, and
what it wrote is deleted when the module ends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from manifests.demo import instrument as demo_instrument
from manifests.models import CacheEvent, Call, Item, Project
from tests.demo_world import committed_then_removed

pytestmark = pytest.mark.django_db


@dataclass(frozen=True)
class Seeded:
    first: str  # what the first run printed
    calls: dict[str, int]  # the demo project's calls per run after the first run
    again: dict[str, int]  # and after the second


def _calls_per_run() -> dict[str, int]:
    calls = Call.objects.filter(project__slug="demo").values_list("run__run_id", flat=True)
    counts: dict[str, int] = {}
    for run_id in calls:
        counts[run_id] = counts.get(run_id, 0) + 1
    return counts


@pytest.fixture(scope="module")
def seeded(django_db_setup, django_db_blocker) -> Iterator[Seeded]:
    with django_db_blocker.unblock(), committed_then_removed():
        first = StringIO()
        call_command("seed_demo", stdout=first)
        calls = _calls_per_run()
        call_command("seed_demo", stdout=StringIO())
        yield Seeded(first=first.getvalue(), calls=calls, again=_calls_per_run())


def test_it_prints_a_login_and_a_key(seeded):
    assert "demo / demo-password" in seeded.first and "ctx_" in seeded.first


def test_it_stores_nothing_twice(seeded):
    assert sum(seeded.calls.values()) > 250
    assert seeded.again == seeded.calls


def test_it_loads_the_claude_code_session(seeded):
    assert "Claude Code session: 6 calls captured by ctxkit proxy" in seeded.first
    assert Call.objects.filter(project__slug="demo", agent="claude-cli", builder_name="ctxkit.proxy").count() == 6


def test_it_loads_the_imported_sessions(seeded):
    imported = Call.objects.filter(project__slug="demo", builder_name="ctxkit.import")
    assert f"imported sessions: {imported.count()} calls from agents' transcripts by ctxkit import" in seeded.first
    assert imported.count() >= 5


def test_it_loads_an_otlp_run(seeded):
    assert "OTLP run:  4 calls from 7 spans (3 not inference)" in seeded.first
    calls = list(Call.objects.filter(project__slug="demo", run__run_id="otlp-support-triage").order_by("step"))
    assert [c.step for c in calls] == [0, 1, 2, 3]
    assert {(c.agent, c.model, c.provider, c.builder_name) for c in calls} == {
        ("support-triage", "gpt-4o-2024-08-06", "openai", "otlp")}
    assert [c.cache_read_tokens for c in calls] == [0, 1280, 1280, 1280]
    assert list(Item.objects.filter(call=calls[3]).order_by("ordinal").values_list("kind", flat=True)) == [
        "system", "tools", "tools", "task", "history", "tool_result", "history", "tool_result", "user"]
    causes = dict(CacheEvent.objects.filter(call__in=calls).values_list("call__step", "cause"))
    assert causes[1] == causes[3] == CacheEvent.HIT
    assert seeded.again["otlp-support-triage"] == 4

    browser = Client()
    browser.force_login(get_user_model().objects.get(username="demo"))
    page = browser.get(f"/p/demo/calls/{calls[3].call_id}/")
    assert page.status_code == 200 and b"support-triage" in page.content


def test_it_loads_the_instrumented_run(seeded):
    assert "instrument run: 8 calls recorded around the anthropic client, 0 already there" in seeded.first
    calls = list(Call.objects.filter(project=Project.objects.get(slug="demo"), run__run_id=demo_instrument.RUN_ID)
                 .order_by("step"))
    assert [c.step for c in calls] == list(range(8))
    assert {(c.agent, c.builder_name) for c in calls} == {("helpdesk", "ctxkit.instrument")}
