"""Every dashboard page in Chromium on the demo data: charts drawn (Plotly's SVG in the DOM),
no console errors, filters and the what-if slider work, links lead where they say."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db


def test_it_draws_the_overview_and_links_to_the_three_questions(site, watched):
    page = watched.page
    page.goto(site.project_url())
    assert watched.charts("#chart-hit") >= 1
    for chart in ("#chart-kind", "#chart-cached", "#chart-causes"):
        assert watched.charts(chart) >= 1, chart
    expect(page.locator('[data-card="calls"] .value')).not_to_have_text("–")
    expect(page.locator("#q-cache")).to_contain_text("system changed")
    watched.shot("overview")
    assert watched.errors == []
    page.click("#q-compactions >> text=user_constraints")
    expect(page).to_have_url(re.compile(r"/compactions/\?failed=user_constraints"))
    expect(page.locator("#compactions tbody tr")).to_have_count(1)
    assert watched.errors == []


def test_it_filters_from_the_filter_bar_and_keeps_the_filters_in_links(site, watched):
    page = watched.page
    page.goto(site.project_url("runs/"))
    assert watched.charts("#chart-runs") >= 1
    page.select_option("select[name=agent]", "refund-analyst")
    page.click("#filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"agent=refund-analyst"))
    rows = page.locator("#runs tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("refunds-budget-")
    page.click("#runs >> text=refunds-budget-800")
    expect(page).to_have_url(re.compile(r"/runs/refunds-budget-800/\?agent=refund-analyst"))
    expect(page.locator("nav.tabs a[data-nav=cache]")).to_have_attribute("href", re.compile(r"agent=refund-analyst"))
    watched.shot("runs-filtered")
    assert watched.errors == []


def test_it_draws_a_run_and_each_step_leads_to_its_call(site, watched):
    page = watched.page
    page.goto(site.project_url("runs/coder-list-endpoint/"))
    assert watched.charts("#chart-steps") >= 1 and watched.charts("#chart-hits") >= 1
    expect(page.locator("#steps tbody tr")).to_have_count(9)
    watched.shot("run")
    page.click("#steps >> text=coder-list-endpoint/step-6")
    expect(page).to_have_url(re.compile(r"/calls/coder-list-endpoint/step-6/"))
    expect(page.locator("#call-id")).to_have_text("coder-list-endpoint/step-6")
    expect(page.locator("[data-compaction]")).to_contain_text("user_constraints")
    page.click("#run-link")
    expect(page).to_have_url(re.compile(r"/runs/coder-list-endpoint/"))
    assert watched.errors == []


def test_it_draws_the_call_view_and_replays_it_at_another_budget(site, watched):
    page = watched.page
    page.goto(site.project_url("calls/refunds-budget-800/step-6/"))
    assert watched.charts("#allocation-window") >= 1
    assert watched.charts("#allocation-items") >= 1
    # The window bar holds one segment per item in the context, then the other input the provider
    # counted (the question, framing), the headroom and the reserve.
    expect(page.locator("#allocation-window .point")).to_have_count(9)
    rate = page.locator('#whatif-evidence tr[data-evidence="rate_limit"] td').nth(2)
    expect(rate).not_to_have_text("present")
    assert watched.charts("#whatif-chart") >= 1
    # ctxkit built the demo: the replay is labelled exact, not an approximation.
    expect(page.locator("#whatif-fidelity-label")).to_have_attribute("data-exact", "yes")
    expect(page.locator("#whatif-fidelity-label")).to_contain_text("Exact replay")
    watched.shot("call")
    # The number boxes take an exact token count; the slider beside each follows.
    page.locator("#whatif-budget-num").fill("1200")
    page.locator("#whatif-budget-num").press("Enter")
    page.locator("#whatif-reserve-num").fill("240")
    page.locator("#whatif-reserve-num").press("Enter")
    expect(page.locator("#whatif")).to_have_attribute("data-budget", "1200")
    expect(rate).to_have_text("present")
    assert abs(int(page.locator("#whatif-budget").input_value()) - 1200) <= 10
    assert "#whatif=1200,240" in page.url
    watched.shot("call-whatif-1200")
    page.locator("#whatif-reserve-num").blur()  # leave the box (Tab), then reset
    page.click("#whatif-reset")
    expect(page.locator("#whatif")).to_have_attribute("data-budget", "800")
    expect(rate).not_to_have_text("present")
    assert watched.errors == []


def test_it_triages_evidence_and_links_each_step_to_its_call(site, watched):
    page = watched.page
    page.goto(site.project_url("evidence/"))
    assert watched.charts("#chart-causes") >= 1
    page.fill("#evidence-search input[name=q]", "rate_limit")
    page.click("#evidence-search button")
    expect(page.locator("#search-keys")).to_contain_text("rate_limit")
    page.click("#search-keys >> text=rate_limit")
    expect(page).to_have_url(re.compile(r"key=rate_limit"))
    assert watched.charts("#chart-timeline") >= 1
    expect(page.locator('#timeline tr[data-step="6"]')).to_contain_text("no")
    watched.shot("evidence-timeline")
    page.click('#timeline tr[data-step="6"] a')
    expect(page).to_have_url(re.compile(r"/calls/refunds-budget-800/step-6/"))
    row = page.locator('#evidence tr[data-evidence="rate_limit"]')
    expect(row).to_contain_text("history got 79 tokens at budget 800")
    assert watched.errors == []


def test_it_shows_the_cache_regression_and_leads_to_its_call(site, watched):
    page = watched.page
    page.goto(site.project_url("cache/"))
    assert watched.charts("#chart-cache") >= 1
    card = page.locator("[data-regression]").first
    expect(card.locator(".changed-segment")).to_have_text("system")
    watched.shot("cache")
    card.locator("text=the call where it crossed the threshold").click()
    expect(page).to_have_url(re.compile(r"/calls/research-\d+/step-\d+/"))
    expect(page.locator(".warning").first).to_contain_text("timestamp")
    assert watched.errors == []


def test_it_filters_compactions_by_failed_invariant(site, watched):
    page = watched.page
    page.goto(site.project_url("compactions/"))
    assert watched.charts("#chart-compactions") >= 1
    page.select_option("#compaction-filter select[name=failed]", "pending_obligations")
    page.click("#compaction-filter button")
    expect(page.locator("#compactions")).to_contain_text("No compactions match")
    page.select_option("#compaction-filter select[name=failed]", "user_constraints")
    page.click("#compaction-filter button")
    expect(page).to_have_url(re.compile(r"failed=user_constraints"))
    expect(page.locator("#compactions tbody tr")).to_have_count(1)
    watched.shot("compactions")
    page.click("#compactions >> text=coder-list-endpoint/step-6")
    expect(page.locator("[data-compaction]")).to_contain_text("do not change public API compatibility")
    assert watched.errors == []
