"""The filter bar shows what the URL says: values without data, presets, the active filters."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.django_db


def get(world, user, query: str) -> str:
    r = world.client(user).get(f"/p/{world.project.slug}/runs/?{query}")
    assert r.status_code == 200
    return r.content.decode()


def test_it_shows_an_agent_without_data_as_selected_to_the_owner(demo_world):
    body = get(demo_world, demo_world.owner, "agent=nobody")
    assert '<option value="nobody" selected>nobody</option>' in body
    assert not re.search(r'<option value=""[^>]*selected[^>]*>all agents', body)
    chips = re.search(r'id="active-filters">(.*?)</p>', body, flags=re.S).group(1)
    assert "agent: <b>nobody</b>" in chips


def test_it_marks_the_active_preset_and_offers_the_others_to_a_member(demo_world):
    body = get(demo_world, demo_world.member, "range=7d&agent=refund-analyst")
    presets = re.search(r'class="presets"[^>]*>(.*?)</span>', body, flags=re.S).group(1)
    assert re.search(r'href="\?agent=refund-analyst&amp;range=7d" aria-current="true"', presets)
    assert 'href="?agent=refund-analyst&amp;range=1h"' in presets and "last 30d" in presets
    chips = re.search(r'id="active-filters">(.*?)</p>', body, flags=re.S).group(1)
    # Each filter can be removed on its own: removing the agent keeps the range.
    assert 'href="?range=7d" aria-label="Remove the agent filter"' in chips


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
