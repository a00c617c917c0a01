"""The runs list's folder and branch in Chromium: the form narrows the list, a row's folder link
does too, hostile text stays text, axe finds no serious violation in light and dark, and the page
does not scroll sideways at 390 px. Screenshots go to test-artifacts/runs-place-*.png."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import ARTIFACTS, watch
from tests.browser.test_a11y import DESKTOP, PHONE, serious_violations, settle
from tests.support import manifest

pytestmark = pytest.mark.django_db

REPO = "/home/dev/src/ctxview"
LONG = "/home/dev/work/clients/acme-logistics/monorepo/services/billing-refunds-service"
HOSTILE = '/tmp/<img src=x onerror="window.__pwned=1">'
RUNS = {
    "place-main": (REPO, "main"),
    "place-topic": (REPO, "feat/runs-list-filters-and-a-rather-long-branch-name"),
    "place-long": (LONG, "fix/rounding"),
    "place-hostile": (HOSTILE, "<b>bold</b>"),
}


@pytest.fixture(scope="module")
def posted(site):
    """Through the real API over HTTP, in the default range, before any test's transaction begins."""
    now = datetime.now(UTC) - timedelta(minutes=5)
    manifests = [manifest(f"{run}-0", run_id=run, started_at=(now + timedelta(seconds=n)).isoformat(),
                               workspace={"cwd": cwd, "git_branch": branch})
                 for n, (run, (cwd, branch)) in enumerate(RUNS.items())]
    request = urllib.request.Request(
        f"{site.url}/api/v1/manifests", data=json.dumps({"manifests": manifests}).encode(), method="POST",
        headers={"Authorization": f"Bearer {site.world.key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.loads(response.read())["accepted"] == len(RUNS)
    return site


def rows(page) -> list[str]:
    return sorted(r for r in page.locator("#runs tbody tr[data-run]").evaluate_all(
        "rows => rows.map(r => r.dataset.run)") if r.startswith("place-"))


def test_the_form_and_a_rows_folder_narrow_the_runs_list(posted, browser):
    context = browser.new_context(viewport=DESKTOP, storage_state=posted.state)
    page = context.new_page()
    w = watch(page)
    page.goto(posted.project_url("runs/"))
    settle(page)
    assert rows(page) == sorted(RUNS)
    long_folder = page.locator('#runs tr[data-run="place-long"] [data-cwd]')
    expect(long_folder).to_have_text("…/services/billing-refunds-service")
    expect(page.locator('#runs tr[data-run="place-hostile"] [data-branch]')).to_have_text("<b>bold</b>")
    page.locator("#place-cwd").select_option(REPO)
    page.locator("#runs-place button[type=submit]").click()
    page.wait_for_load_state("load")
    assert rows(page) == ["place-main", "place-topic"]
    page.locator("#place-branch").select_option("main")
    page.locator("#runs-place button[type=submit]").click()
    page.wait_for_load_state("load")
    assert rows(page) == ["place-main"]
    page.goto(posted.project_url("runs/"))
    page.locator('#runs tr[data-run="place-long"] [data-cwd]').click()
    page.wait_for_load_state("load")
    assert rows(page) == ["place-long"]
    expect(page.locator("#runs-place .chip")).to_contain_text(LONG)
    assert page.evaluate("typeof window.__pwned") == "undefined" and w.dialogs == []
    context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_runs_list_with_folders_and_branches_has_no_serious_accessibility_violation(posted, browser, scheme):
    found = {}
    context = browser.new_context(viewport=DESKTOP, color_scheme=scheme, storage_state=posted.state, bypass_csp=True)
    page = context.new_page()
    for path in ("runs/", f"runs/?cwd={REPO}&branch=main", "runs/place-topic/"):
        page.goto(posted.project_url(path))
        settle(page)
        violations = serious_violations(page)
        if violations:
            found[path] = violations
        if path == "runs/":
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"runs-place-desktop-{scheme}.png"), full_page=True)
    context.close()
    assert found == {}, json.dumps(found, indent=1)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_runs_list_does_not_scroll_sideways_on_a_phone(posted, browser, scheme):
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, color_scheme=scheme,
                                  storage_state=posted.state)
    page = context.new_page()
    page.goto(posted.project_url("runs/"))
    settle(page)
    ARTIFACTS.mkdir(exist_ok=True)
    # The top (filters, chart) and the table's first rows, each one phone screen high.
    page.screenshot(path=str(ARTIFACTS / f"runs-place-390px-{scheme}-top.png"))
    page.locator("#runs").evaluate("table => table.scrollIntoView()")
    page.wait_for_timeout(150)
    page.screenshot(path=str(ARTIFACTS / f"runs-place-390px-{scheme}-table.png"))
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    context.close()
