"""Re-reads in Chromium: the run view's marks and the overview's compaction fixes, at 1280 and
390 px, light and dark: axe finds no serious violation, the page does not scroll sideways, the
mark links to the call's re-reads. Screenshots (the pages, the steps chart and table, the top fixes)
go to test-artifacts/rereads-*.png."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from playwright.sync_api import expect

from tests.analysis.support import item
from tests.analysis.test_rereads import run, tool_pair
from tests.browser.conftest import ARTIFACTS, watch
from tests.browser.test_a11y import DESKTOP, PHONE, serious_violations, settle

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def posted(site, django_db_blocker):
    """Two runs that compact and read a file again after it, through the real API, analysed
    before any test's transaction begins: one whose compaction saved more than its re-read
    cost, one whose re-read cost more than it saved."""
    from manifests import tasks
    from manifests.models import Call

    start = datetime.now(UTC) - timedelta(minutes=10)
    manifests = []
    for run_id, agent, before, after in (("reread-saved", "reader", 5000, 800), ("reread-lost", "loser", 1000, 700)):
        manifests += run(tool_pair(1), tool_pair(1), [item("sum", kind="summary", tokens=50)],
                         [item("sum", kind="summary", tokens=50), *tool_pair(2, tokens=410)], compaction_at=2,
                         run_id=run_id, agent=agent, start=start, before=before, after=after)
    request = urllib.request.Request(
        f"{site.url}/api/v1/manifests", data=json.dumps({"manifests": manifests}).encode(), method="POST",
        headers={"Authorization": f"Bearer {site.world.key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.loads(response.read())["accepted"] == len(manifests)
    with django_db_blocker.unblock():
        tasks.analyze_calls(list(Call.objects.filter(run__run_id__in=["reread-saved", "reread-lost"])
                                 .values_list("pk", flat=True)))
    return site


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_run_view_and_overview_show_rereads_readably(posted, browser, owner_state, scheme, viewport):
    size = "390px" if viewport is PHONE else "desktop"
    context = browser.new_context(viewport=viewport, color_scheme=scheme, storage_state=owner_state, bypass_csp=True,
                                  is_mobile=viewport is PHONE, has_touch=viewport is PHONE)
    page = context.new_page()
    w = watch(page)
    found = {}
    page.goto(posted.project_url("runs/reread-saved/"))
    settle(page)
    mark = page.locator('#steps tr[data-step="3"] a.reread-mark')
    expect(mark).to_have_text("↻ 1 re-read, 410 tokens")
    expect(page.locator("#run-rereads")).to_contain_text("1 re-read after loss in 1 step, 410 re-read tokens")
    found["run"] = serious_violations(page)
    wide = {"run": page.evaluate("document.documentElement.scrollWidth")}
    w.shot(f"rereads-run-{size}-{scheme}")
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#chart-steps").screenshot(path=str(ARTIFACTS / f"rereads-run-chart-{size}-{scheme}.png"))
    page.locator(".table-wrap:has(#steps)").screenshot(path=str(ARTIFACTS / f"rereads-run-steps-{size}-{scheme}.png"))
    page.goto(posted.project_url(""))
    settle(page)
    lost = page.locator('#top-fixes li[data-fix^="compaction:loser|"]')
    expect(lost).to_contain_text("This compaction cost more in re-reads than it saved")
    found["overview"] = serious_violations(page)
    wide["overview"] = page.evaluate("document.documentElement.scrollWidth")
    w.shot(f"rereads-overview-{size}-{scheme}")
    page.locator("#top-fixes").screenshot(path=str(ARTIFACTS / f"rereads-fixes-{size}-{scheme}.png"))
    page.goto(posted.project_url("runs/reread-saved/"))
    settle(page)
    page.locator('#steps tr[data-step="3"] a.reread-mark').click()
    page.wait_for_load_state("load")
    expect(page.locator("#whatif")).to_have_attribute("data-budget", "8000")  # the replay has answered
    assert page.url.endswith("#rereads")  # and left the section's anchor in the URL
    expect(page.locator("h2#rereads")).to_be_in_viewport()
    context.close()
    assert {k: v for k, v in found.items() if v} == {}
    assert all(width <= viewport["width"] for width in wide.values()), wide
    assert w.errors == []
