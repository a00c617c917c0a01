"""The filter bar shows what the URL says: values without data, presets, the active filters."""

from __future__ import annotations

import pytest

from tests.html_page import parse

pytestmark = pytest.mark.django_db


def get(world, user, query: str) -> str:
    r = world.client(user).get(f"/p/{world.project.slug}/runs/?{query}")
    assert r.status_code == 200
    return r.content.decode()


def test_it_shows_an_agent_without_data_as_selected_to_the_owner(demo_world):
    body = get(demo_world, demo_world.owner, "agent=nobody")
    page = parse(body)
    assert [o.text for o in page.select('select[name="agent"] option[selected]')] == ["nobody"]
    chips = page.one("#active-filters").select(".chip")
    assert [(c.text, c.one("b").text) for c in chips] == [("agent: nobody ×", "nobody")]


def test_it_marks_the_active_preset_and_offers_the_others_to_a_member(demo_world):
    body = get(demo_world, demo_world.member, "range=7d&agent=refund-analyst")
    page = parse(body)
    presets = page.one(".presets").select("a")
    assert [a.get("href") for a in presets if a.get("aria-current") == "true"] == ["?agent=refund-analyst&range=7d"]
    assert "?agent=refund-analyst&range=1h" in [a.get("href") for a in presets]
    assert "last 30d" in [a.text for a in presets]
    # Each filter can be removed on its own: removing the agent keeps the range.
    remove = page.one('#active-filters a[aria-label="Remove the agent filter"]')
    assert remove.get("href") == "?range=7d"


def test_it_reads_a_custom_range_from_the_date_inputs(demo_world):
    body = get(demo_world, demo_world.member, "range=custom&since=2026-11-29T08:00&until=2026-11-30T09:30")
    assert 'name="since" value="2026-11-29T08:00"' in body and 'name="until" value="2026-11-30T09:30"' in body
    assert '<option value="custom" selected>' in body
    assert "from: <b>2026-11-29T08:00</b>" in body


def test_it_shows_the_default_state_in_words_when_no_filter_is_set(demo_world):
    body = get(demo_world, demo_world.member, "")
    assert "Showing all agents and models, last 24h" in body
    assert 'name="since" value=""' in body  # no placeholder that looks like a set value


def test_it_keeps_its_own_404_for_an_outsider(demo_world):
    assert demo_world.client(demo_world.outsider).get(
        f"/p/{demo_world.project.slug}/runs/?agent=nobody").status_code == 404
