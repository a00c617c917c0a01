"""Finding, clicking through, comparing, large and empty data, error pages and exports, in
Chromium on the demo data (plus one 1,000-step run)."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import datetime

import pytest
from playwright.sync_api import Page, expect

from manifests import ingest
from manifests.models import Call, Run
from tests.support import manifest

pytestmark = pytest.mark.django_db

LONG_RUN = "long-run-1000"
LONG_STEPS = 1000


@pytest.fixture(scope="module")
def long_run(demo_world, django_db_blocker):
    """A 1,000-step run, ingested through the real ingest path (and analysed) once per module."""
    with django_db_blocker.unblock():
        for start in range(0, LONG_STEPS, 250):
            batch = []
            for step in range(start, start + 250):
                m = manifest(f"{LONG_RUN}/step-{step}", run_id=LONG_RUN, step=step, items=4, agent="long-runner")
                m["compactions"] = []
                batch.append(m)
            report = ingest.ingest_body(project=demo_world.project, body=json.dumps({"manifests": batch}).encode())
            assert report.count(ingest.ACCEPTED) == 250
        yield Run.objects.get(project=demo_world.project, run_id=LONG_RUN)
        Run.objects.filter(project=demo_world.project, run_id=LONG_RUN).delete()


def click_point(page: Page, selector: str, index: int = 0) -> None:
    """Click a Plotly point or bar where a person would: on its middle, after hovering it."""
    points = page.locator(selector)
    points.first.wait_for(state="attached", timeout=15_000)
    # A bar of a bucket where the value is 0 is drawn with no area: take the index-th that has one.
    drawn = [n for n in range(points.count()) if (b := points.nth(n).bounding_box()) and b["height"] > 1]
    assert len(drawn) > index, f"{selector}: {len(drawn)} drawn points"
    point = points.nth(drawn[index])
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    assert box, selector
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.wait_for_timeout(150)
    page.mouse.click(x, y)


def overflowing(page: Page) -> list[str]:
    """Elements of the page's content wider than a 390 px screen (tables scroll in their own box;
    the top bar's 390 px layout is checked by the layout tests)."""
    return page.evaluate("""[...document.querySelectorAll('main *')]
        .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.table-scroll'))
        .map(e => e.tagName + '.' + e.className + '#' + e.id)""")


def test_it_finds_a_run_a_call_and_an_ambiguous_text_from_the_top_bar(site, watched):
    page = watched.page
    page.goto(site.project_url())
    page.fill("#find-q", "refunds-budget-800")
    page.press("#find-q", "Enter")
    expect(page).to_have_url(re.compile(r"/runs/refunds-budget-800/$"))
    page.fill("#find-q", "coder-list-endpoint/step-6")
    page.press("#find-q", "Enter")
    expect(page.locator("#call-id")).to_have_text("coder-list-endpoint/step-6")
    page.fill("#find-q", "refunds-budget-")
    page.press("#find-q", "Enter")
    expect(page).to_have_url(re.compile(r"/search/\?q=refunds-budget-"))
    expect(page.locator('#search-results tr[data-kind="run"]').first).to_be_visible()
    watched.shot("search-results")
    page.click("#search-results >> text=refunds-budget-800")
    expect(page).to_have_url(re.compile(r"/runs/refunds-budget-800/"))
    assert watched.errors == []


def test_it_clicks_through_from_the_overview_charts(site, watched):
    page = watched.page
    for chart, point in (("#chart-hit", ".scatterlayer .trace:first-child .point"), ("#chart-kind", ".bars .point"),
                         ("#chart-cached", ".bars .point"), ("#chart-causes", ".bars .point")):
        page.goto(site.project_url())
        assert watched.charts(chart) >= 1
        click_point(page, f"{chart} {point}")
        expect(page).to_have_url(re.compile(r"/calls/\?.*since=.*until="), timeout=10_000)
        expect(page.locator("#calls tbody tr[data-call]").first).to_be_visible()
        if chart == "#chart-causes":
            expect(page).to_have_url(re.compile(r"cause="))
    watched.shot("calls-bucket")
    assert watched.errors == []


def test_it_clicks_through_from_the_runs_run_and_cache_charts(site, watched):
    page = watched.page
    page.goto(site.project_url("runs/"))
    watched.charts("#chart-runs")
    click_point(page, "#chart-runs .point")
    expect(page).to_have_url(re.compile(r"/runs/[^/]+/"))

    page.goto(site.project_url("runs/coder-list-endpoint/"))
    watched.charts("#chart-steps")
    click_point(page, "#chart-steps .bars .point", 3)
    expect(page).to_have_url(re.compile(r"/calls/coder-list-endpoint/step-\d+/"))
    page.goto(site.project_url("runs/coder-list-endpoint/"))
    watched.charts("#chart-hits")
    click_point(page, "#chart-hits .point", 2)
    expect(page).to_have_url(re.compile(r"/calls/coder-list-endpoint/step-2/"))

    page.goto(site.project_url("cache/"))
    watched.charts("#chart-cache")
    click_point(page, "#chart-cache .scatterlayer .trace:first-child .point")
    expect(page).to_have_url(re.compile(r"/calls/\?.*agent=.*model=.*since="))
    # The bucket's URL is built in the page: exactly one bucket, whose calls the list shows.
    since, until = (datetime.strptime(re.search(rf"{name}=([^&]+)", page.url).group(1).replace("%3A", ":"),
                                      "%Y-%m-%dT%H:%MZ") for name in ("since", "until"))
    assert (until - since).total_seconds() in (3600, 86400)
    expect(page.locator("#calls tbody tr[data-call]").first).to_be_visible()
    assert watched.errors == []


def test_it_clicks_through_from_the_evidence_and_compaction_charts(site, watched):
    page = watched.page
    page.goto(site.project_url("evidence/"))
    watched.charts("#chart-causes")
    click_point(page, "#chart-causes .bars .point")
    expect(page).to_have_url(re.compile(r"/calls/\?.*cause="))
    expect(page.locator("#calls tbody tr[data-call]").first).to_be_visible()
    page.goto(site.project_url("evidence/?key=rate_limit"))
    watched.charts("#chart-timeline")
    click_point(page, "#chart-timeline .nsewdrag")
    expect(page).to_have_url(re.compile(r"/calls/refunds-budget-\d+/step-\d+/"))
    page.goto(site.project_url("compactions/"))
    watched.charts("#chart-compactions")
    click_point(page, "#chart-compactions .point")
    expect(page).to_have_url(re.compile(r"/calls/[^?]+/step-\d+/"))
    assert watched.errors == []


def test_it_compares_a_call_with_the_previous_step_from_the_run_view(site, watched, browser):
    page = watched.page
    page.goto(site.project_url("runs/refunds-budget-800/"))
    page.locator('#steps tr[data-step="6"] .compare-link').click()
    expect(page).to_have_url(re.compile(r"/compare/\?b=refunds-budget-800"))
    expect(page.locator("#side-a")).to_contain_text("refunds-budget-800/step-5")
    expect(page.locator('#compare-evidence tr[data-evidence="rate_limit"]')).to_contain_text("lost")
    watched.shot("compare")
    page.fill("#compare-pick input[name=a]", "refunds-budget-800/step-2")
    page.click("#compare-pick button")
    expect(page.locator("#side-a")).to_contain_text("refunds-budget-800/step-2")
    page.set_viewport_size({"width": 390, "height": 844})
    watched.shot("compare-390")
    assert overflowing(page) == []
    assert watched.errors == []


def test_it_keeps_a_1000_step_run_readable(site, watched, long_run):
    page = watched.page
    page.goto(site.project_url(f"runs/{LONG_RUN}/"))
    assert watched.charts("#chart-steps") >= 1
    expect(page.locator("#steps tbody tr")).to_have_count(100)
    expect(page.locator(".pager")).to_contain_text("page 1 of 10")
    # Thinned axis labels: about 20 ticks, not 1,000.
    ticks = page.locator("#chart-steps .xtick").count()
    assert 3 <= ticks <= 30, ticks
    watched.shot("run-1000")
    page.click(".pager .next-page")
    expect(page.locator("#steps tbody tr").first).to_have_attribute("data-step", "100")
    # Sorting by input, server side, keeps the page parameter out and marks the header.
    page.click('#steps th a[data-sort="step"]')
    expect(page.locator("#steps tbody tr").first).to_have_attribute("data-step", str(LONG_STEPS - 1))
    expect(page.locator('#steps th[aria-sort="descending"]')).to_contain_text("Step")
    assert Call.objects.filter(run=long_run).count() == LONG_STEPS
    assert watched.errors == []


def test_it_says_no_data_instead_of_drawing_empty_charts(site, watched):
    page = watched.page
    page.goto(site.project_url("?agent=nobody"))
    for chart in ("#chart-hit", "#chart-kind", "#chart-cached", "#chart-causes"):
        expect(page.locator(f"{chart} .chart-empty")).to_have_text("No data in this range.")
        expect(page.locator(f"{chart} .main-svg")).to_have_count(0)
    expect(page.locator("select[name=agent] option:checked")).to_have_text("nobody")
    expect(page.locator("#active-filters")).to_contain_text("agent: nobody")
    watched.shot("overview-empty")
    page.goto(site.project_url("cache/?agent=nobody"))
    expect(page.locator("#chart-cache .chart-empty")).to_be_visible()
    assert watched.errors == []


def test_it_shows_the_app_404_page_for_an_unknown_call(site, watched):
    page = watched.page
    response = page.goto(site.project_url("calls/no-such/call/"))
    assert response.status == 404
    expect(page.locator("#not-found h1")).to_have_text("Not found")
    expect(page.locator("header.top .project-name")).to_be_visible()
    watched.shot("not-found")
    page.click("#not-found >> text=Back to")
    expect(page).to_have_url(re.compile(rf"/p/{site.world.project.slug}/$"))


def test_it_downloads_the_exports_of_the_filtered_calls(site, watched):
    page = watched.page
    page.goto(site.project_url("calls/?range=all&run=refunds-budget-800"))
    expect(page.locator("#calls tbody tr[data-call]").first).to_be_visible()
    watched.shot("calls")
    with page.expect_download() as info:
        page.click('#exports a[data-export="calls.csv"]')
    download = info.value
    assert download.suggested_filename.endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(open(download.path(), encoding="utf-8").read())))
    expected = Call.objects.filter(project=site.world.project, run__run_id="refunds-budget-800").count()
    assert len(rows) == expected and {r["run_id"] for r in rows} == {"refunds-budget-800"}
    with page.expect_download() as info:
        page.click('#exports a[data-export="evidence.jsonl"]')
    lines = open(info.value.path(), encoding="utf-8").read().splitlines()
    assert lines and all(json.loads(line)["run_id"] == "refunds-budget-800" for line in lines)
    assert watched.errors == []


def test_it_sorts_the_calls_list_from_its_headers(site, watched):
    page = watched.page
    page.goto(site.project_url("calls/?range=all"))
    page.click('#calls th a[data-sort="input"]')
    expect(page).to_have_url(re.compile(r"sort=-input"))
    expect(page.locator('#calls th[aria-sort="descending"]')).to_contain_text("Input")
    values = [int(v) for v in page.locator("#calls tbody tr td:nth-child(7)").all_inner_texts()]
    assert values == sorted(values, reverse=True)
    page.set_viewport_size({"width": 390, "height": 844})
    watched.shot("calls-390")
    assert overflowing(page) == []
    assert watched.errors == []
