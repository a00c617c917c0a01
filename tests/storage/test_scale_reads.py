"""The dashboard's reads that do not grow with the tables (docs/performance.md, "Dashboard
pages") show the same rows in the same order as the plain queries, on the demo data."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db.models import Count

from manifests.models import CallFigures, Compaction, Item
from manifests.selectors import call_list
from manifests.selectors import compactions as compaction_sel
from manifests.selectors import search as search_sel
from manifests.selectors.filters import Filters
from manifests.selectors.sorting import Sort

pytestmark = pytest.mark.django_db


def _before(project, filters, cq, sort):
    """The plain calls list query: one query, every column NULLS LAST."""
    return list(call_list.calls(project, filters, cq).select_related("run", "figures", "cache_event")
                .order_by(*sort.order_by(call_list.SORTS)).values_list("pk", flat=True))


@pytest.mark.parametrize("column", list(call_list.SORTS))
def test_the_calls_list_pages_through_the_same_calls_in_the_same_order(demo_world, monkeypatch, column):
    project = demo_world.project
    # A call not analysed yet has no figures row: it sorts with the NULLs, last.
    unanalysed = CallFigures.objects.filter(project=project).order_by("pk").first()
    unanalysed.delete()
    # Pages of 29 of the demo's ~1,300 calls: some 45 page boundaries per order, most inside
    # runs of equal values (agent, model, step), where a missing tie-break shows.
    monkeypatch.setattr(call_list, "CALLS_PER_PAGE", 29)
    filters, cq = Filters(range="all"), call_list.CallQuery()
    for descending in (True, False):
        sort = Sort(column, descending)
        expected = _before(project, filters, cq, sort)
        seen, page = [], 1
        while True:
            result = call_list.calls_page(project, filters, cq, sort, page)
            seen += [c.pk for c in result.object_list]
            assert result.paginator.count == len(expected)
            if not result.has_next():
                break
            page += 1
        assert seen == expected, (column, descending)
    if column == "hit":
        last = call_list.calls_page(project, filters, cq, Sort("hit", True), page).object_list[-1]
        assert last.pk == unanalysed.call_id or last.figures is None or last.figures.cache_hit_ratio is None


@pytest.mark.parametrize("column", ["hit", "cost"])
def test_the_calls_list_sorted_by_a_figure_keeps_the_other_filters(demo_world, monkeypatch, column):
    project = demo_world.project
    agent = call_list.calls(project, Filters(range="all"), call_list.CallQuery()).values_list(
        "agent", flat=True).first()
    # Calls without the figure (no input: no hit rate) go last, after the pages of those with it.
    first = CallFigures.objects.filter(project=project, call__agent=agent).order_by("pk").first()
    CallFigures.objects.filter(pk=first.pk).update(cache_hit_ratio=None)
    monkeypatch.setattr(call_list, "CALLS_PER_PAGE", 11)
    for filters, cq in [(Filters(range="all", agent=agent), call_list.CallQuery()),
                        (Filters(range="all"), call_list.CallQuery(cache="prefix_changed"))]:
        for descending in (True, False):
            sort = Sort(column, descending)
            expected = _before(project, filters, cq, sort)
            assert expected
            seen, page = [], 1
            while True:
                result = call_list.calls_page(project, filters, cq, sort, page)
                seen += [c.pk for c in result.object_list]
                if not result.has_next():
                    break
                page += 1
            assert seen == expected, (filters, cq, descending)


def test_the_calls_list_reads_a_bounded_range_and_its_figures(demo_world, django_assert_max_num_queries):
    project = demo_world.project
    calls = list(call_list.calls(project, Filters(range="all"), call_list.CallQuery()).order_by("started_at"))
    middle = calls[len(calls) // 2].started_at
    filters = Filters(range="custom", since=middle, until=middle + timedelta(hours=6))
    sort = Sort("hit", True)
    expected = _before(project, filters, call_list.CallQuery(), sort)[:call_list.CALLS_PER_PAGE]
    with django_assert_max_num_queries(3):  # the count, the page's keys, then its rows with run, figures ...
        result = call_list.calls_page(project, filters, call_list.CallQuery(), sort, 1)
    with django_assert_max_num_queries(0):  # ... and cache event, all read
        rows = list(result.object_list)
        assert [c.pk for c in rows] == expected
        for c in rows:
            assert c.run.run_id and (c.figures.cache_hit_ratio is None or 0 <= c.figures.cache_hit_ratio <= 1)


def _compactions_before(project, filters, failed="", only_failed=False):
    qs = filters.apply(Compaction.objects.filter(project=project), since_field="call__started_at",
                       agent_field="call__agent", model_field="call__model")
    if failed:
        qs = qs.filter(invariants__name=failed, invariants__ok=False)
    elif only_failed:
        qs = qs.filter(failed_invariants__gt=0)
    return list(qs.order_by("-call__started_at", "-pk").distinct().values_list("pk", flat=True))


def test_the_compaction_review_lists_the_same_events_with_their_call_figures_and_invariants(
        demo_world, monkeypatch, django_assert_max_num_queries):
    project = demo_world.project
    monkeypatch.setattr(compaction_sel, "PER_PAGE", 2)
    agent = Compaction.objects.filter(project=project).select_related("call").first().call.agent
    names = list(Compaction.objects.filter(project=project, invariants__ok=False)
                 .values_list("invariants__name", flat=True).distinct())
    assert names, "the demo has a failed invariant"
    cases = [(Filters(range="all"), {}), (Filters(range="all", agent=agent), {}),
             (Filters(range="all"), {"failed": names[0]}), (Filters(range="all"), {"only_failed": True})]
    for filters, kw in cases:
        expected, seen, page = _compactions_before(project, filters, **kw), [], 1
        while True:
            result = compaction_sel.events(project, filters, page=page, **kw)
            with django_assert_max_num_queries(0):  # call, run, figures, invariants: already read
                for c in result.object_list:
                    assert c.call.started_at == c.started_at and c.call.run.run_id
                    assert (c.figures is None) or c.figures.compaction_id == c.pk
                    assert {i.compaction_id for i in c.invariants.all()} <= {c.pk}
            seen += [c.pk for c in result.object_list]
            if not result.has_next():
                break
            page += 1
        assert seen == expected, kw
    # Each event's invariants are exactly its own.
    for c in compaction_sel.events(project, Filters(range="all")).object_list:
        assert sorted(i.pk for i in c.invariants.all()) == sorted(c.invariants.model.objects.filter(
            compaction_id=c.pk).values_list("pk", flat=True))
    counts = {r["name"]: r["n"] for r in compaction_sel.failure_counts(project, Filters(range="all"))}
    assert counts == {r["invariants__name"]: r["n"] for r in Compaction.objects.filter(
        project=project, invariants__ok=False).values("invariants__name").annotate(n=Count("pk", distinct=True))}


def test_the_failure_counts_and_the_failed_filter_hold_under_an_agent_filter(demo_world):
    # Invariants have no agent or model: the agent narrows the compactions, never the invariants
    # themselves (it raised a FieldError, a 500 on the overview, when applied to both).
    project = demo_world.project
    failed = Compaction.objects.filter(project=project, invariants__ok=False).select_related("call").first()
    assert failed is not None, "the demo has a failed invariant"
    for agent in (failed.call.agent, "no-such-agent"):  # the last one matches nothing
        filters = Filters(range="all", agent=agent)
        counts = {r["name"]: r["n"] for r in compaction_sel.failure_counts(project, filters)}
        assert counts == {r["invariants__name"]: r["n"] for r in Compaction.objects.filter(
            project=project, call__agent=agent, invariants__ok=False).values("invariants__name")
            .annotate(n=Count("pk", distinct=True))}
        name = failed.invariants.filter(ok=False).first().name
        shown = [c.pk for c in compaction_sel.events(project, filters, failed=name).object_list]
        assert shown == _compactions_before(project, filters, failed=name)[:compaction_sel.PER_PAGE]
    assert counts == {} and shown == []


def test_the_search_looks_for_source_refs_in_the_latest_calls_of_the_range(demo_world, monkeypatch):
    project = demo_world.project
    item = Item.objects.filter(project=project).exclude(source_ref="").exclude(source_ref=None) \
        .order_by("-started_at").first()
    assert item is not None, "the demo has items with a source ref"
    ref, at = item.source_ref, item.started_at
    around = Filters(range="custom", since=at - timedelta(minutes=1), until=at + timedelta(minutes=1))
    assert ref in [m.value for m in search_sel.find(project, ref, around) if m.kind == "ref"]
    # Outside the range: not looked for (the page says so).
    before = Filters(range="custom", since=at - timedelta(days=400), until=at - timedelta(days=399))
    assert ref not in [m.value for m in search_sel.find(project, ref, before) if m.kind == "ref"]
    # Beyond the latest REF_SCAN_CALLS calls of the range: not looked for either.
    later_calls = call_list.calls(project, Filters(range="custom", since=at + timedelta(seconds=1)),
                                  call_list.CallQuery()).count()
    if later_calls:
        monkeypatch.setattr(search_sel, "REF_SCAN_CALLS", later_calls)
        assert ref not in [m.value for m in search_sel.find(project, ref, Filters(range="all")) if m.kind == "ref"]
    monkeypatch.setattr(search_sel, "REF_SCAN_CALLS", later_calls + 1)
    assert ref in [m.value for m in search_sel.find(project, ref, Filters(range="all")) if m.kind == "ref"]


def test_the_search_page_says_where_source_refs_were_looked_for(demo_world):
    body = demo_world.client(demo_world.member).get(
        f"/p/{demo_world.project.slug}/search/?q=nothing-like-this&range=7d").content.decode()
    assert 'id="search-refs-bound"' in body and f"latest {search_sel.REF_SCAN_CALLS} calls from" in body
    overview = demo_world.client(demo_world.member).get(f"/p/{demo_world.project.slug}/?range=7d").content.decode()
    assert '<input type="hidden" name="range" value="7d">' in overview  # the top bar's box carries the range


def test_the_overview_shows_the_same_latest_missing_evidence_with_its_calls(demo_world, django_assert_max_num_queries):
    from manifests.models import Attribution
    from manifests.selectors import overview as overview_sel

    project = demo_world.project
    agent = Attribution.objects.filter(project=project, is_risk=False).select_related("call").first().call.agent
    for filters in (Filters(range="all"), Filters(range="all", agent=agent)):
        before = filters.apply(Attribution.objects.filter(project=project, is_risk=False).select_related(
            "call", "lost_at"), agent_field="call__agent", model_field="call__model").order_by("-started_at")
        expected = sorted((a.pk, a.call.call_id, a.lost_at.call_id if a.lost_at else None) for a in before)
        with django_assert_max_num_queries(3):  # the attributions, their calls, the calls they were lost at
            rows = overview_sel.recent_missing(project, filters, limit=100_000)  # all: no ties at the cut
            got = sorted((a.pk, a.call.call_id, a.lost_at.call_id if a.lost_at else None) for a in rows)
        assert got == expected and len(got) > 0
        latest = [a.started_at for a in overview_sel.recent_missing(project, filters)]
        assert latest == [a.started_at for a in before[:8]]


def _unbounded_call_reads(queries) -> list[str]:
    """The queries that join calls on an attribution's lost-at id, or read calls by a list of
    ids with no bound on the partition column."""
    lost_join = re.compile(r'JOIN "manifests_call" \S+ ON \("manifests_attribution"\."lost_at_id"')
    joins = [q["sql"] for q in queries if lost_join.search(q["sql"])]
    reads = [q["sql"] for q in queries if q["sql"].lstrip().startswith("SELECT")
             and 'FROM "manifests_call"' in q["sql"] and '"manifests_call"."id" IN' in q["sql"]]
    return joins + [sql for sql in reads if '"manifests_call"."started_at"' not in sql.split("WHERE", 1)[1]]


def test_the_calls_where_evidence_was_lost_are_read_within_the_run_s_time_span(demo_world):
    """A lost-at call is found by id: unbounded, PostgreSQL plans that read over every day's
    partition; the API, the evidence timeline and the overview each bound it by time."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from manifests import services
    from manifests.selectors import overview as overview_sel
    from tests.conftest import Api

    api = Api(services.create_api_key(project=demo_world.project, can_ingest=False, can_read=True)[1])
    with CaptureQueriesContext(connection) as seen:
        body = api.get("/api/v1/calls/coder-list-endpoint/step-8").json()
    assert [a["lost_at_step"] for a in body["attributions"] if a["lost_at_call_id"]] == [6]
    assert _unbounded_call_reads(seen.captured_queries) == []

    with CaptureQueriesContext(connection) as seen:
        page = demo_world.client(demo_world.member).get(
            f"/p/{demo_world.project.slug}/evidence/?key=api_compat&run=coder-list-endpoint").content.decode()
    assert 'class="lost-at"' in page
    assert _unbounded_call_reads(seen.captured_queries) == []

    with CaptureQueriesContext(connection) as seen:
        rows = overview_sel.recent_missing(demo_world.project, Filters(range="all"), limit=100_000)
    assert any(a.lost_at is not None and a.lost_at.step == 6 for a in rows)
    assert _unbounded_call_reads(seen.captured_queries) == []
