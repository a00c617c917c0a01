"""The top bar's search: straight to a run, a call, an evidence key, a source ref or a hash;
a results page when the text is ambiguous."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from manifests.models import Call, Item

pytestmark = pytest.mark.django_db


def find(world, user, q: str):
    return world.client(user).get(f"/p/{world.project.slug}/search/?q={quote(q)}")


def test_it_goes_straight_to_a_run_for_the_owner(demo_world):
    r = find(demo_world, demo_world.owner, "refunds-budget-800")
    assert r.status_code == 302
    assert r["Location"] == f"/p/{demo_world.project.slug}/runs/refunds-budget-800/"


def test_it_goes_straight_to_a_call_by_id_for_a_member(demo_world):
    r = find(demo_world, demo_world.member, "refunds-budget-800/step-6")
    assert r.status_code == 302
    assert r["Location"] == f"/p/{demo_world.project.slug}/calls/refunds-budget-800/step-6/"


def test_it_goes_to_a_call_by_a_unique_prefix_of_its_id(demo_world):
    call = Call.objects.filter(project=demo_world.project, run__run_id="coder-list-endpoint", step=6).get()
    # The run id itself is an exact match; "…/step-6" is a prefix of one call id only.
    r = find(demo_world, demo_world.member, call.call_id[:-1] + "6")
    assert r["Location"].endswith(f"/calls/{call.call_id}/")


def test_it_goes_to_the_evidence_timeline_of_a_key(demo_world):
    r = find(demo_world, demo_world.member, "rate_limit")
    assert r.status_code == 302
    assert r["Location"].startswith(f"/p/{demo_world.project.slug}/evidence/?key=rate_limit")


def test_it_finds_a_prefix_hash_by_its_beginning(demo_world):
    call = Call.objects.filter(project=demo_world.project).exclude(prefix_hash="").order_by("pk").first()
    beginning = call.prefix_hash[:12]
    matches = Call.objects.filter(project=demo_world.project, prefix_hash__startswith=beginning)
    assert matches.values("prefix_hash").distinct().count() == 1
    r = find(demo_world, demo_world.member, beginning.upper())  # hashes match whatever the case
    assert r.status_code == 302
    assert f"/calls/?prefix={call.prefix_hash}" in r["Location"]
    listing = demo_world.client(demo_world.member).get(r["Location"]).content.decode()
    assert f'id="calls-summary">{matches.count()} call' in listing


def test_it_finds_an_item_content_hash(demo_world):
    item = Item.objects.filter(project=demo_world.project).exclude(content_hash=None).order_by("pk").first()
    r = find(demo_world, demo_world.member, item.content_hash)
    assert r.status_code == 302
    assert f"q={item.content_hash}" in r["Location"]


def test_it_lists_the_matches_when_the_text_is_ambiguous(demo_world):
    r = find(demo_world, demo_world.member, "refunds-budget-")
    assert r.status_code == 200
    body = r.content.decode()
    assert 'id="search-results"' in body
    for run in ("refunds-budget-800", "refunds-budget-"):
        assert run in body
    assert body.count('data-kind="run"') >= 2 and 'data-kind="call"' in body


def test_it_says_when_nothing_matches_and_escapes_the_text(demo_world):
    r = find(demo_world, demo_world.member, "<script>nothing-like-this</script>")
    assert r.status_code == 200
    body = r.content.decode()
    assert 'id="search-none"' in body
    assert "<script>nothing-like-this" not in body and "&lt;script&gt;nothing-like-this" in body


def test_it_refuses_an_overlong_query_with_400(demo_world):
    r = find(demo_world, demo_world.member, "x" * 201)
    assert r.status_code == 400 and b'id="bad-param"' in r.content


def test_it_answers_404_to_an_outsider(demo_world):
    assert find(demo_world, demo_world.outsider, "refunds-budget-800").status_code == 404


def test_it_puts_the_search_box_in_the_top_bar(demo_world):
    body = demo_world.client(demo_world.member).get(f"/p/{demo_world.project.slug}/").content.decode()
    assert f'action="/p/{demo_world.project.slug}/search/"' in body and 'role="search"' in body
