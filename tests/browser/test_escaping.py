"""Hostile text is data: payloads posted through the API are shown as text in Chromium and
nothing of them runs (no script, no handler, no dialog)."""

from __future__ import annotations

import json
import urllib.request

import pytest
from playwright.sync_api import expect

from tests.support import manifest

pytestmark = pytest.mark.django_db

SCRIPT = "<script>window.__pwned=1;alert(1)</script>"
IMG = '<img src=x onerror="window.__pwned=2;alert(2)">'
SVG = "<svg onload=window.__pwned=3>"
PAYLOADS = [SCRIPT, IMG, SVG]


def hostile_manifest(call_id: str, step: int) -> dict:
    m = manifest(call_id, run_id="evil-run", step=step, items=6, agent=f"agent {SCRIPT}"[:200])
    m["items"][1]["id"] = SVG
    m["items"][3]["reason"] = SCRIPT + IMG
    m["items"][4]["text"] = IMG + SCRIPT
    m["items"][4]["source_ref"] = "javascript:window.__pwned=4"
    m["items"][5]["group"] = "g1"
    m["evidence"] = [{"key": "evil-key", "label": IMG[:150], "literal": SCRIPT, "expected_item": SVG,
                      "present": False}]
    m["compactions"][0]["invariants"][0]["lost"] = [SCRIPT, '<a href="javascript:window.__pwned=5">x</a>']
    m["compactions"][0]["trigger"] = IMG[:150]
    m["warnings"] = [f"<iframe src=javascript:window.__pwned=6></iframe>{SCRIPT}"]
    return m


@pytest.fixture(scope="module")
def posted(site):
    """Through the real API over HTTP, before any test's transaction begins."""
    body = json.dumps({"manifests": [hostile_manifest("evil-call-0", 0), hostile_manifest("evil-call-1", 1)]})
    request = urllib.request.Request(
        f"{site.url}/api/v1/manifests", data=body.encode(), method="POST",
        headers={"Authorization": f"Bearer {site.world.key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        report = json.loads(response.read())
    assert report["accepted"] == 2, report
    return site


def hover(page, selector: str, nth: int = 0) -> None:
    """Move the mouse onto a Plotly point (Plotly's drag layer takes the events, not the point)."""
    point = page.locator(selector).nth(nth)
    point.scroll_into_view_if_needed()
    box = point.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_timeout(200)


def check_nothing_ran(watched) -> None:
    assert watched.page.evaluate("typeof window.__pwned") == "undefined"
    assert watched.dialogs == []
    assert watched.errors == []  # an <img src=x> made into an element would log a failed load


def test_it_shows_hostile_text_as_text_on_the_call_page(posted, watched):
    page = watched.page
    page.goto(posted.project_url("calls/evil-call-1/"))
    assert watched.charts("#allocation-items") >= 1
    expect(page.locator("#items")).to_contain_text(SCRIPT)
    expect(page.locator("#items")).to_contain_text(SVG)
    expect(page.locator("#evidence")).to_contain_text(IMG[:40])
    expect(page.locator(".warning").first).to_contain_text("<iframe")
    page.locator("#items details summary").first.click()  # open the sent text
    expect(page.locator("#items details pre").first).to_contain_text(IMG)
    hover(page, "#allocation-items .point", nth=1)  # the row of the <svg> item: its hover label
    expect(page.locator("#allocation-items .hoverlayer")).to_contain_text("pwned")
    hover(page, "#allocation-window .point")
    expect(page.locator('#whatif-items tr[data-item="<svg onload=window.__pwned=3>"]')).to_have_count(1)
    page.locator("#whatif-budget-num").fill("9000")
    page.locator("#whatif-budget-num").press("Enter")
    expect(page.locator("#whatif")).to_have_attribute("data-budget", "9000")
    watched.shot("escaping-call")
    check_nothing_ran(watched)


def test_it_shows_hostile_text_as_text_on_every_other_page(posted, watched):
    page = watched.page
    for path, chart in (("runs/evil-run/", "#chart-steps"), ("runs/?range=all", "#chart-runs"),
                        ("evidence/?key=evil-key&run=evil-run&range=all", "#chart-timeline"),
                        ("evidence/?q=evil-key&range=all", "#chart-causes"),
                        ("compactions/?range=all", "#chart-compactions"), ("?range=all", "#chart-hit"),
                        ("cache/?range=all", "#chart-cache")):
        page.goto(posted.project_url(path))
        assert watched.charts(chart) >= 1, path
        check_nothing_ran(watched)
    page.goto(posted.project_url("compactions/?range=all"))
    expect(page.locator("#compactions")).to_contain_text(SCRIPT)
    hover(page, "#chart-compactions .point")
    page.goto(posted.project_url("runs/?range=all"))
    expect(page.locator("select[name=agent]")).to_contain_text(SCRIPT)  # the agent name, in the filter bar
    watched.shot("escaping-runs")
    check_nothing_ran(watched)
