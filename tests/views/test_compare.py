"""Two calls side by side: items that entered, left or changed; prefix segments; evidence."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from ctxkit.figures import in_context
from manifests.models import Call
from manifests.selectors.calls import diff_with_previous
from tests.demo_world import CANARY
from tests.html_page import parse

pytestmark = pytest.mark.django_db


def compare(world, user, query: str):
    return world.client(user).get(f"/p/{world.project.slug}/compare/?{query}")


def test_it_compares_a_call_with_its_previous_step_for_the_owner(demo_world):
    r = compare(demo_world, demo_world.owner, f"b={quote('refunds-budget-800/step-6')}")
    assert r.status_code == 200
    body = r.content.decode()
    assert 'id="side-a"' in body and "refunds-budget-800/step-5" in body
    # The rate-limit error was present at step 5 and is lost at step 6.
    row = parse(body).one('tr[data-evidence="rate_limit"]')
    assert "present" in row.text and "missing" in row.text
    assert [badge.text for badge in row.select(".badge")] == ["lost"]
    # The same entered / left items as the call view's "since the previous call".
    call = Call.objects.get(project=demo_world.project, call_id="refunds-budget-800/step-6")
    diff = diff_with_previous(call, list(call.items.all()))
    assert body.count('data-change="entered"') == len(diff.entered)
    assert body.count('data-change="left"') == len(diff.left)
    for change in diff.left:
        assert f'data-change="left" data-item="{change.item_id}"' in body


def test_it_compares_any_two_calls_for_a_member(demo_world):
    r = compare(demo_world, demo_world.member,
                f"a={quote('research-001/step-0')}&b={quote('coder-list-endpoint/step-6')}")
    assert r.status_code == 200
    body = r.content.decode()
    # Different agents: the prefix changed; an item only the second call sent entered, an item
    # only the first sent left.
    whole = next(tr for tr in parse(body).select("#compare-prefix tr") if tr.text.startswith("whole prefix"))
    assert [badge.text for badge in whole.select(".badge.bad")] == ["changed"]
    a, b = (Call.objects.get(project=demo_world.project, call_id=c)
            for c in ("research-001/step-0", "coder-list-endpoint/step-6"))
    sent_a = {i.item_id for i in a.items.all() if in_context(i)}
    sent_b = {i.item_id for i in b.items.all() if in_context(i)}
    assert sent_a ^ sent_b
    for item_id in sent_b - sent_a:
        assert f'data-change="entered" data-item="{item_id}"' in body
    for item_id in sent_a - sent_b:
        assert f'data-change="left" data-item="{item_id}"' in body


def test_it_shows_what_changed_action_or_tokens(demo_world):
    b = Call.objects.get(project=demo_world.project, call_id="coder-list-endpoint/step-6")
    body = compare(demo_world, demo_world.member, f"b={quote(b.call_id)}").content.decode()
    changed = [tr.text for tr in parse(body).select('tr[data-change="changed"]')]
    assert changed, "a compaction step changes items"
    assert all(("action" in c or "tokens" in c or "zone" in c or "content changed" in c) for c in changed)
    assert 'id="compare-prefix"' in body


def test_it_says_when_the_call_is_the_first_of_its_run(demo_world):
    body = compare(demo_world, demo_world.member, f"b={quote('coder-list-endpoint/step-0')}").content.decode()
    assert 'id="compare-first"' in body


def test_it_answers_404_for_an_unknown_call_and_400_without_one(demo_world):
    r = compare(demo_world, demo_world.member, "b=no-such-call")
    assert r.status_code == 404 and b'id="not-found"' in r.content and b"no-such-call" in r.content
    r = compare(demo_world, demo_world.member, f"b={CANARY}/step-0")  # another project's call
    assert r.status_code == 404
    assert compare(demo_world, demo_world.member, "").status_code == 400


def test_it_is_linked_from_the_run_call_and_cache_views(demo_world):
    client = demo_world.client(demo_world.member)
    slug = demo_world.project.slug
    run = client.get(f"/p/{slug}/runs/refunds-budget-800/").content.decode()
    assert f'href="/p/{slug}/compare/?b=refunds-budget-800/step-6' in run.replace("%2F", "/")
    call = client.get(f"/p/{slug}/calls/refunds-budget-800/step-6/").content.decode()
    assert 'id="compare-link"' in call
    cache = client.get(f"/p/{slug}/cache/?range=all").content.decode()
    assert 'class="compare-link"' in cache


def test_it_answers_404_to_an_outsider(demo_world):
    r = compare(demo_world, demo_world.outsider, f"b={quote('refunds-budget-800/step-6')}")
    assert r.status_code == 404
