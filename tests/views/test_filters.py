"""Filters live in the URL (agent, model, time range), are validated, narrow every page and
are carried along by the links, so a view can be shared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.http import QueryDict

from manifests.selectors import filters

pytestmark = pytest.mark.django_db


def test_it_answers_a_bad_filter_with_400_naming_the_parameter(demo_world):
    client = demo_world.client(demo_world.owner)
    base = f"/p/{demo_world.project.slug}/"
    for query, param in (("range=fortnight", "range"), ("since=yesterday", "since"), ("until=2026-13-40", "until"),
                         ("since=2026-11-29&until=2026-11-28", "until"), ("agent=" + "x" * 201, "agent")):
        for page in ("", "runs/", "cache/", "evidence/", "compactions/"):
            r = client.get(f"{base}{page}?{query}")
            assert r.status_code == 400, (page, query)
            assert f"<code>{param}</code>" in r.content.decode(), (page, query)


def test_it_narrows_the_runs_list_by_agent_and_model(demo_world):
    client = demo_world.client(demo_world.owner)
    body = client.get(f"/p/{demo_world.project.slug}/runs/?agent=coder").content.decode()
    assert "coder-list-endpoint" in body and "research-001" not in body and "refunds-budget-800" not in body
    body = client.get(f"/p/{demo_world.project.slug}/runs/?model=gpt-5-mini").content.decode()
    assert "refunds-budget-800" in body and "coder-list-endpoint" not in body


def test_it_narrows_by_time_range(demo_world):
    client = demo_world.client(demo_world.owner)
    future = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%d")
    body = client.get(f"/p/{demo_world.project.slug}/runs/?since={future}").content.decode()
    assert "No runs in this range" in body
    body = client.get(f"/p/{demo_world.project.slug}/runs/?range=24h").content.decode()
    assert "refunds-budget-800" in body


def test_it_carries_the_filters_in_every_link(demo_world):
    client = demo_world.client(demo_world.owner)
    slug = demo_world.project.slug
    body = client.get(f"/p/{slug}/runs/?agent=refund-analyst&range=7d").content.decode()
    assert f'href="/p/{slug}/runs/refunds-budget-800/?agent=refund-analyst&amp;range=7d"' in body
    assert f'href="/p/{slug}/cache/?agent=refund-analyst&amp;range=7d"' in body
    body = client.get(f"/p/{slug}/runs/refunds-budget-800/?agent=refund-analyst&range=7d").content.decode()
    assert f'href="/p/{slug}/calls/refunds-budget-800/step-6/?agent=refund-analyst&amp;range=7d"' in body
    # The filter form shows the active filters back.
    assert '<option value="refund-analyst" selected>' in body
    assert '<option value="7d" selected>' in body


def test_it_reads_ranges_and_custom_times():
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    f = filters.parse(QueryDict("range=6h&agent=a"), now=now)
    assert (f.since, f.until, f.agent) == (now - timedelta(hours=6), None, "a")
    f = filters.parse(QueryDict("since=2026-11-28&until=2026-11-28"), now=now)
    assert f.since == datetime(2026, 11, 28, tzinfo=UTC) and f.until == datetime(2026, 11, 29, tzinfo=UTC)
    assert f.querystring() == "since=2026-11-28&until=2026-11-28"
    # A named range chosen in the bar wins over a since/until left in the URL.
    assert filters.parse(QueryDict("range=1h&since=2026-01-01"), now=now).since == now - timedelta(hours=1)
    assert filters.parse(QueryDict(""), now=now).range == filters.DEFAULT_RANGE
    assert filters.parse(QueryDict("range=all"), now=now).since is None
    prev = filters.parse(QueryDict("range=24h"), now=now).previous()
    assert prev.since == now - timedelta(hours=48) and prev.until == now - timedelta(hours=24)
