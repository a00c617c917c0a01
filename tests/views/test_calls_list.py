"""The filtered calls list (what a chart bucket opens) and the sortable tables."""

from __future__ import annotations

from datetime import timedelta

import pytest

from manifests.models import Attribution, CacheEvent, Call
from tests.html_page import parse

pytestmark = pytest.mark.django_db


def listing(world, user, query: str = ""):
    return world.client(user).get(f"/p/{world.project.slug}/calls/?{query}")


def rows(body: str) -> list[str]:
    return [tr.get("data-call") for tr in parse(body).select("tr[data-call]")]


def headers(body: str) -> dict[str, tuple[str | None, str | None]]:
    """The sortable headers by their column: (their aria-sort, their link)."""
    return {link.get("data-sort"): (th.get("aria-sort"), link.get("href"))
            for th in parse(body).select("th[aria-sort]") for link in th.select("a[data-sort]")}


def test_it_lists_the_calls_of_the_range_for_the_owner(demo_world):
    r = listing(demo_world, demo_world.owner, "range=all")
    assert r.status_code == 200
    total = Call.objects.filter(project=demo_world.project).count()
    assert f'id="calls-summary">{total} calls' in r.content.decode()
    newest = Call.objects.filter(project=demo_world.project).order_by("-started_at", "-pk")[:50]
    assert rows(r.content.decode()) == [c.call_id for c in newest]


def test_it_lists_the_calls_of_one_bucket_for_a_member(demo_world):
    first = Call.objects.filter(project=demo_world.project).order_by("started_at").first()
    start = first.started_at.replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(hours=1)
    expected = Call.objects.filter(project=demo_world.project, started_at__gte=start, started_at__lt=end)
    r = listing(demo_world, demo_world.member, f"since={start:%Y-%m-%dT%H:%M}Z&until={end:%Y-%m-%dT%H:%M}Z")
    body = r.content.decode()
    assert f'id="calls-summary">{expected.count()} call' in body
    assert first.call_id in body


def test_it_narrows_by_run_prefix_cache_cause_and_missing_cause(demo_world):
    project = demo_world.project
    body = listing(demo_world, demo_world.member, "range=all&run=coder-list-endpoint").content.decode()
    assert len(rows(body)) == Call.objects.filter(project=project, run__run_id="coder-list-endpoint").count()
    assert all(c.startswith("coder-list-endpoint/") for c in rows(body))

    changed = CacheEvent.objects.filter(project=project, cause="prefix_changed")
    body = listing(demo_world, demo_world.member, "range=all&cache=prefix_changed").content.decode()
    assert f'id="calls-summary">{changed.count()} call' in body

    cause = Attribution.objects.filter(project=project, is_risk=False).order_by("pk").first().cause
    with_cause = Attribution.objects.filter(project=project, cause=cause).values("call").distinct()
    body = listing(demo_world, demo_world.member, f"range=all&cause={cause}").content.decode()
    assert f'id="calls-summary">{with_cause.count()} call' in body

    call = Call.objects.filter(project=project).order_by("pk").first()
    same = Call.objects.filter(project=project, prefix_hash=call.prefix_hash).count()
    body = listing(demo_world, demo_world.member, f"range=all&prefix={call.prefix_hash}").content.decode()
    assert f'id="calls-summary">{same} call' in body


def test_it_sorts_on_the_server_and_marks_the_sorted_header(demo_world):
    body = listing(demo_world, demo_world.member, "range=all&sort=-input").content.decode()
    inputs = list(Call.objects.filter(project=demo_world.project).order_by("-input_tokens", "-pk")
                  .values_list("call_id", flat=True)[:50])
    assert rows(body) == inputs
    sort, link = headers(body)["input"]
    assert sort == "descending" and "sort=input" in link
    assert headers(body)["time"] == ("none", "?range=all&sort=-time")
    body = listing(demo_world, demo_world.member, "range=all&sort=step").content.decode()
    sort, link = headers(body)["step"]
    assert sort == "ascending" and "sort=-step" in link


def test_it_answers_a_bad_sort_or_cause_with_400(demo_world):
    for query in ("sort=raw", "cache=nonsense", "cause=<script>"):
        r = listing(demo_world, demo_world.member, query)
        assert r.status_code == 400, query
        assert b'id="bad-param"' in r.content


def test_it_sorts_the_runs_table_by_calls(demo_world):
    r = demo_world.client(demo_world.member).get(f"/p/{demo_world.project.slug}/runs/?range=all&sort=-calls")
    body = r.content.decode()
    runs = [tr.get("data-run") for tr in parse(body).select("tr[data-run]")]
    counts = {run: Call.objects.filter(project=demo_world.project, run__run_id=run).count() for run in runs}
    assert [counts[run] for run in runs] == sorted(counts.values(), reverse=True)
    assert 'aria-sort="descending"' in body


def test_it_answers_404_to_an_outsider(demo_world):
    assert listing(demo_world, demo_world.outsider, "range=all").status_code == 404


def test_it_links_many_calls_exactly_as_reverse_would():
    from django.urls import reverse

    from manifests.views.pages import call_linker

    link = call_linker("demo", "agent=a+b&range=7d")
    for call_id in ("run-7/step-3", "with space/and#hash?q=1", "ünïcode/ステップ", "100%/a;b=c", "~:@!$&'()*+,"):
        assert link(call_id) == reverse("call-detail", args=["demo", call_id]) + "?agent=a+b&range=7d", call_id
    assert call_linker("demo")("a/b") == reverse("call-detail", args=["demo", "a/b"])


def test_it_bounds_a_hex_prefix_by_the_next_digit():
    from manifests.selectors.search import hex_begins

    assert hex_begins("h", "ab9") == {"h__gte": "ab9", "h__lt": "aba", "h__startswith": "ab9"}
    assert hex_begins("h", "0f")["h__lt"] == "0g"
