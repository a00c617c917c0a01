"""The demo's OTLP run (manifests/demo/otlp.py), loaded by seed_demo through the OTLP mapping."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from manifests.models import CacheEvent, Call, Item, Project


@pytest.mark.django_db
def test_it_loads_an_otlp_run_with_seed_demo_once(capsys):
    call_command("seed_demo")
    assert "OTLP run:  4 calls from 7 spans (3 not inference)" in capsys.readouterr().out
    project = Project.objects.get(slug="demo")
    calls = list(Call.objects.filter(project=project, run__run_id="otlp-support-triage").order_by("step"))
    assert [c.step for c in calls] == [0, 1, 2, 3]
    assert {(c.agent, c.model, c.provider, c.builder_name) for c in calls} == {
        ("support-triage", "gpt-4o-2024-08-06", "openai", "otlp")}
    assert [c.cache_read_tokens for c in calls] == [0, 1280, 1280, 1280]
    assert list(Item.objects.filter(call=calls[3]).order_by("ordinal").values_list("kind", flat=True)) == [
        "system", "tools", "tools", "task", "history", "tool_result", "history", "tool_result", "user"]
    causes = dict(CacheEvent.objects.filter(call__in=calls).values_list("call__step", "cause"))
    assert causes[1] == causes[3] == CacheEvent.HIT
    call_command("seed_demo")
    assert Call.objects.filter(project=project, run__run_id="otlp-support-triage").count() == 4

    browser = Client()
    browser.force_login(get_user_model().objects.get(username="demo"))
    page = browser.get(f"/p/demo/calls/{calls[3].call_id}/")
    assert page.status_code == 200 and b"support-triage" in page.content
