"""Accessibility, small screens, dark mode and page weight, in Chromium on the demo data.

axe-core (vendored: tests/browser/vendor/axe.min.js, npm axe-core) runs on every page,
in light and in dark mode, and finds no serious or critical violation of WCAG 2.2 A/AA;
no page scrolls sideways at 390 px; every chart has a data table; the skip link works
from the keyboard; the first page transfers at most 1 MB of JavaScript.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ARTIFACTS, watch

pytestmark = pytest.mark.django_db

AXE = (Path(__file__).parent / "vendor" / "axe.min.js").read_text()
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
# Every page of the dashboard, in the states that draw different things.
PAGES = [
    "",
    "runs/",
    "runs/coder-list-endpoint/",
    "calls/refunds-budget-800/step-6/",
    "calls/coder-list-endpoint/step-7/",
    "evidence/",
    "evidence/?key=rate_limit&run=refunds-budget-800",
    "evidence/?q=rate",
    "cache/",
    "compactions/",
    "compactions/?failed=user_constraints",
    "settings/",
    "calls/",
    "calls/?cause=dropped_by_budget",
    "search/?q=refunds",
    "compare/?b=coder-list-endpoint/step-7",
    "runs/ops-refunds-watch/",
    "live/",
]


def serious_violations(page: Page) -> list[dict]:
    # Injected through the DevTools protocol (bypass_csp): the pages' own CSP allows no inline script.
    page.add_script_tag(content=AXE)
    violations = page.evaluate(
        """async (tags) => {
            const r = await axe.run(document, { runOnly: { type: "tag", values: tags } });
            return r.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help,
              nodes: v.nodes.slice(0, 4).map(n => n.target.join(" ") + " :: " + (n.failureSummary || "")) }));
        }""",
        AXE_TAGS,
    )
    return [v for v in violations if v["impact"] in ("serious", "critical")]


def settle(page: Page) -> None:
    """Wait until the page's charts are drawn (a page without charts is ready when loaded)."""
    page.wait_for_load_state("load")
    if page.locator(".chart").count():
        page.locator(".chart .main-svg").first.wait_for(state="attached", timeout=15_000)
    page.wait_for_timeout(150)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_it_has_no_serious_accessibility_violation_on_any_page(site, owner_pages, browser, scheme):
    found = {}
    context = owner_pages(viewport=DESKTOP, color_scheme=scheme)
    page = context.new_page()
    w = watch(page)
    for path in ["/"] + [site.project_url(p).removeprefix(site.url) for p in PAGES] + [
            site.project_url("runs/?range=bad").removeprefix(site.url)]:
        page.goto(site.url + path)
        settle(page)
        # The data tables are part of the page too: open the first one and check it as well.
        if page.locator("details.chart-data").count():
            page.locator("details.chart-data summary").first.click()
        violations = serious_violations(page)
        if violations:
            found[path] = violations
    context.close()
    # Pages a member, a viewer or an anonymous visitor sees.
    anonymous = browser.new_context(viewport=DESKTOP, color_scheme=scheme, bypass_csp=True)
    page = anonymous.new_page()
    page.goto(f"{site.url}/accounts/login/")
    found_login = serious_violations(page)
    if found_login:
        found["/accounts/login/"] = found_login
    anonymous.close()
    member = browser.new_context(viewport=DESKTOP, color_scheme=scheme, bypass_csp=True, storage_state=site.state)
    page = member.new_page()
    page.goto(site.project_url("settings/"))
    for_member = serious_violations(page)
    if for_member:
        found["settings/ (member)"] = for_member
    member.close()
    assert found == {}, json.dumps(found, indent=1)
    assert [e for e in w.errors if "status of 400" not in e] == []  # the 400 page was asked for


def test_it_never_scrolls_sideways_on_a_phone(site, owner_pages):
    context = owner_pages(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    wide = {}
    for path in [""] + PAGES:
        page.goto(site.project_url(path) if path else site.url + "/")
        settle(page)
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > PHONE["width"]:
            # The width and the elements that stick out, for the failure message.
            wide[path or "/"] = (width, page.evaluate("""() => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 400).slice(0, 6).map(e => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""))  # noqa: E501
    page.goto(site.project_url("calls/coder-list-endpoint/step-7/"))
    settle(page)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "call-390px.png"), full_page=True)
    context.close()
    assert wide == {}


def test_it_follows_the_system_dark_mode(site, owner_pages):
    context = owner_pages(viewport=DESKTOP, color_scheme="dark")
    page = context.new_page()
    page.goto(site.project_url("calls/coder-list-endpoint/step-7/"))
    settle(page)
    luminance = """(c) => { const [r, g, b] = c.match(/\\d+/g).map(Number);
                            return (0.2126*r + 0.7152*g + 0.0722*b) / 255; }"""
    body = page.evaluate("getComputedStyle(document.body).backgroundColor")
    text = page.evaluate("getComputedStyle(document.body).color")
    assert page.evaluate(f"({luminance})({json.dumps(body)})") < 0.15
    assert page.evaluate(f"({luminance})({json.dumps(text)})") > 0.8
    # Charts take the theme: their background is the page's surface colour, not white.
    paper = page.locator("#allocation-window .main-svg .bg").first.get_attribute("style") or ""
    plot_bg = page.evaluate("getComputedStyle(document.querySelector('#allocation-window .main-svg')).backgroundColor")
    assert "255, 255, 255" not in plot_bg and "rgb(255, 255, 255)" not in paper
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "call-dark.png"), full_page=True)
    context.close()


def test_it_gives_every_chart_a_data_table(site, owner_pages):
    context = owner_pages(viewport=DESKTOP)
    page = context.new_page()
    for path in [p for p in PAGES if p != "settings/"]:
        page.goto(site.project_url(path))
        settle(page)
        charts = page.locator(".chart[id]")
        for i in range(charts.count()):
            chart_id = charts.nth(i).get_attribute("id")
            if not page.locator(f"#{chart_id} .main-svg").count():
                continue  # drawn later (the what-if chart waits for its first replay)
            expect(page.locator(f"#{chart_id}")).to_have_attribute("role", "figure")
            table = page.locator(f"#{chart_id}-data")
            expect(table.locator("summary")).to_contain_text("Data table")
            table.locator("summary").click()
            # The table is built on the details' toggle event, which fires after the click.
            expect(table.locator("tbody tr").first).to_be_attached()
    context.close()


def test_it_states_each_allocation_segment_and_colours_it_by_action(site, owner_pages):
    context = owner_pages(viewport=DESKTOP)
    page = context.new_page()
    page.goto(site.project_url("calls/coder-list-endpoint/step-7/"))
    settle(page)
    legend = page.locator("#allocation-legend")
    rows = page.locator("#allocation-window-data tbody tr")
    for label in ("kept whole", "compressed or cut", "summarized", "dropped", "not sent", "output reserve"):
        expect(legend).to_contain_text(label)
    page.locator("#allocation-window-data summary").click()
    expect(rows.first).to_be_attached()  # built on the toggle event, after the click
    text = rows.all_inner_texts()
    # The turns folded into the history summary are listed as not sent, and as summarized.
    assert any(t.startswith("turn-2") and "not sent" in t and "summarized" in t for t in text), text
    assert any(t.startswith("history") and "in context" in t for t in text), text
    # No two labels above or below the bar overlap, and none leaves the chart.
    boxes = page.evaluate("""() => {
        const svg = document.querySelector('#allocation-window .main-svg').getBoundingClientRect();
        return [...document.querySelectorAll('#allocation-window .annotation-text')].map(t => {
          const b = t.getBoundingClientRect();
          return { text: t.textContent, l: b.left, r: b.right, t: b.top, b: b.bottom, sl: svg.left, sr: svg.right };
        });
    }""")
    assert len(boxes) >= 3
    for i, a in enumerate(boxes):
        assert a["l"] >= a["sl"] - 0.5 and a["r"] <= a["sr"] + 0.5, a
        for b in boxes[i + 1:]:
            apart = a["r"] <= b["l"] or b["r"] <= a["l"] or a["b"] <= b["t"] or b["b"] <= a["t"]
            assert apart, (a, b)
    # A call with a summarized and a cut item: each segment says which.
    page.goto(site.project_url("calls/refunds-budget-800/step-6/"))
    settle(page)
    page.locator("#allocation-window-data summary").click()
    expect(rows.first).to_be_attached()  # built on the toggle event, after the click
    text = rows.all_inner_texts()
    assert any(t.startswith("history") and "summarized" in t for t in text), text
    assert any(t.startswith("tools") and "compressed or cut" in t for t in text), text
    context.close()


def test_it_skips_to_the_content_from_the_keyboard(site, owner_pages):
    context = owner_pages(viewport=DESKTOP)
    page = context.new_page()
    page.goto(site.project_url("runs/"))
    page.keyboard.press("Tab")
    skip = page.locator("a.skip-link")
    expect(skip).to_be_focused()
    expect(skip).to_be_in_viewport()
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()
    # The what-if replay is driven from the keyboard: a number typed, Enter pressed.
    page.goto(site.project_url("calls/refunds-budget-800/step-6/"))
    page.locator("#whatif-budget-num").focus()
    page.keyboard.press("Control+A")
    page.keyboard.type("1200")
    page.keyboard.press("Enter")
    expect(page.locator("#whatif")).to_have_attribute("data-budget", "1200")
    context.close()


def test_it_transfers_at_most_one_megabyte_of_javascript_on_the_first_page(site, browser, owner_state):
    # A new browser context: logged in (its cookies), nothing in its HTTP cache.
    context = browser.new_context(viewport=DESKTOP, storage_state=owner_state)
    page = context.new_page()
    scripts: dict[str, tuple[int, str | None]] = {}

    def on_response(response) -> None:
        if response.request.resource_type == "script":
            response.finished()
            scripts[response.url] = (response.request.sizes()["responseBodySize"],
                                     response.headers.get("content-encoding"))

    page.on("response", on_response)
    page.goto(site.project_url())
    settle(page)
    context.close()
    total = sum(size for size, _ in scripts.values())
    ARTIFACTS.mkdir(exist_ok=True)
    report = {"total_bytes": total, "scripts": scripts}
    (ARTIFACTS / "first-page-javascript.json").write_text(json.dumps(report, indent=1))
    print(f"first page JavaScript transferred: {total} bytes in {len(scripts)} files")
    assert any(url.endswith("/static/vendor/plotly.min.js") for url in scripts)
    assert all(encoding == "gzip" for _, encoding in scripts.values()), scripts
    assert 0 < total <= 1_000_000, scripts
