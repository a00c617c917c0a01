"""The live tail in Chromium: a call posted through the API shows within two seconds of the
answer (the page asks again at most a second after each answer, and the first question it sends
after ingest answered brings the call: checked by the requests, not by a clock, so a busy machine
cannot fail it), pause stops new rows and resume brings them, the page keeps a bounded window of
rows, and it passes axe in light and dark at 390 px without scrolling sideways.

The tests that post are not marked ``django_db``: a test transaction held open here would
lock SQLite against the server's writes (as in test_settings.py). The read-only one
is marked, which is also what makes pytest-django set the test database up when this
module runs alone."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest
from playwright.sync_api import expect

from manifests.selectors import live
from tests.browser.conftest import ARTIFACTS, post, watch
from tests.browser.test_a11y import PHONE, serious_violations
from tests.support import manifest

# The product's promise: a call shows at most two seconds after ingest answered, which the page
# keeps by asking again at most POLL_MS after each answer, the call in the first answer after.
POLL_MS = 1000
# How long a test waits for what the page is bound to do: generous, so that a loaded machine is
# slow, not wrong.
WAIT_MS = 15_000


def live_step(run_id: str, step: int, **extra) -> dict:
    """The run's step made now (the live tail shows the last minutes)."""
    return manifest(f"{run_id}/step-{step}", run_id=run_id, step=step, items=1, started_at=datetime.now(UTC), **extra)


def row(page, call_id: str):
    return page.locator(f'#live tbody tr[data-call="{call_id}"]')


def feed_calls_after(page, requests: list, sent_before: int) -> list[str]:
    """The call ids of the answer to the first feed request the page sent after ``sent_before``
    of them (so after whatever happened then), waiting for that request and its answer."""
    if len(requests) <= sent_before:
        page.wait_for_event("request", predicate=lambda r: "/live.json" in r.url, timeout=WAIT_MS)
    response = requests[sent_before].response()
    assert response is not None and response.status == 200, response
    return [c["call_id"] for c in response.json()["calls"]]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_it_shows_a_posted_call_within_two_seconds_and_pauses(site, browser, scheme):
    run_id = f"live-{scheme}-{uuid4().hex[:6]}"
    # The page's own policy applies (no bypass): the script runs under the CSP.
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, color_scheme=scheme,
                                  storage_state=site.state)
    page = context.new_page()
    w = watch(page)
    feed_requests: list = []
    page.on("request", lambda r: feed_requests.append(r) if "/live.json" in r.url else None)
    page.goto(site.project_url(f"live/?run={run_id}"))
    expect(page.locator("#live-empty")).to_be_visible()
    assert 0 < int(page.locator("#live").get_attribute("data-poll")) <= POLL_MS

    post(site, live_step(run_id, 0))
    sent = len(feed_requests)  # the ones sent so far may have been read before the call was stored
    assert f"{run_id}/step-0" in feed_calls_after(page, feed_requests, sent)
    expect(row(page, f"{run_id}/step-0")).to_have_count(1, timeout=WAIT_MS)
    link = row(page, f"{run_id}/step-0").locator("a").first
    expect(link).to_have_attribute("href", f"/p/{site.world.project.slug}/calls/{run_id}/step-0/")
    expect(page.locator("#live-empty")).to_have_count(0)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]

    # Pause: no request leaves the page and no row arrives, while an unpaused page of the
    # same view asks twice and shows the call.
    page.click("#live-toggle")
    expect(page.locator("#live-toggle")).to_have_text("Resume")
    expect(page.locator("#live-status")).to_contain_text("Paused")
    sent_while_paused = len(feed_requests)
    watcher = context.new_page()
    watcher_requests: list[str] = []
    watcher.goto(site.project_url(f"live/?run={run_id}"))
    watcher.on("response", lambda r: watcher_requests.append(r.url) if "/live.json" in r.url else None)
    post(site, live_step(run_id, 1))
    expect(row(watcher, f"{run_id}/step-1")).to_have_count(1, timeout=WAIT_MS)
    watcher.wait_for_function("n => document.querySelectorAll('#live tbody tr').length === n", arg=2)
    while len(watcher_requests) < 2:
        watcher.wait_for_event("response", predicate=lambda r: "/live.json" in r.url, timeout=WAIT_MS)
    assert row(page, f"{run_id}/step-1").count() == 0
    assert len(feed_requests) == sent_while_paused

    # Resume: it catches up at once.
    sent = len(feed_requests)
    page.click("#live-toggle")
    expect(page.locator("#live-toggle")).to_have_text("Pause")
    assert f"{run_id}/step-1" in feed_calls_after(page, feed_requests, sent)
    expect(row(page, f"{run_id}/step-1")).to_have_count(1, timeout=WAIT_MS)
    assert page.locator("#live tbody tr").evaluate_all("rows => rows.map(r => r.dataset.call)") == [
        f"{run_id}/step-1", f"{run_id}/step-0"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"live-390px-{scheme}.png"), full_page=True)
    assert w.errors == [] and w.dialogs == [], (w.errors, w.dialogs)
    context.close()

    # axe needs its script injected, which the page's policy forbids: a context that
    # bypasses it reads the same page, now holding the rows.
    checked = browser.new_context(viewport=PHONE, is_mobile=True, color_scheme=scheme, storage_state=site.state,
                                  bypass_csp=True)
    page = checked.new_page()
    page.goto(site.project_url(f"live/?run={run_id}"))
    expect(row(page, f"{run_id}/step-1")).to_have_count(1)
    assert serious_violations(page) == []
    checked.close()


def test_it_keeps_a_bounded_window_of_rows(site, browser):
    run_id = f"live-burst-{uuid4().hex[:6]}"
    context = browser.new_context(viewport={"width": 1280, "height": 800}, storage_state=site.state)
    page = context.new_page()
    w = watch(page)
    page.goto(site.project_url(f"live/?run={run_id}"))
    expect(page.locator("#live-empty")).to_be_visible()
    first = live.WINDOW - 50
    post(site, *[live_step(run_id, n) for n in range(first)])
    expect(row(page, f"{run_id}/step-{first - 1}")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#live tbody tr")).to_have_count(first)
    post(site, *[live_step(run_id, n) for n in range(first, first + 100)])
    expect(row(page, f"{run_id}/step-{first + 99}")).to_have_count(1, timeout=WAIT_MS)
    # The newest WINDOW stay, newest first (by arrival: ingest numbers a batch's calls in
    # its own order); the oldest of the first batch left the page.
    expect(page.locator("#live tbody tr")).to_have_count(live.WINDOW)
    shown = page.locator("#live tbody tr").evaluate_all("rows => rows.map(r => [Number(r.dataset.id), r.dataset.call])")
    assert [i for i, _ in shown] == sorted((i for i, _ in shown), reverse=True)
    calls = [c for _, c in shown]
    assert set(calls[:100]) == {f"{run_id}/step-{n}" for n in range(first, first + 100)}
    assert set(calls[100:]) < {f"{run_id}/step-{n}" for n in range(first)}
    assert w.errors == [], w.errors
    context.close()


@pytest.mark.django_db
def test_it_paints_the_newest_calls_on_the_server(site, browser):
    """Before any script runs: the rows, newest first, each linking to its call."""
    context = browser.new_context(viewport=PHONE, storage_state=site.state, java_script_enabled=False)
    page = context.new_page()
    page.goto(site.project_url("live/"))
    shown = page.locator("#live tbody tr[data-id]")
    ids = shown.evaluate_all("rows => rows.map(r => Number(r.dataset.id))")
    assert ids == sorted(ids, reverse=True) and len(ids) <= live.WINDOW
    for i in range(min(shown.count(), 3)):
        call_id = shown.nth(i).get_attribute("data-call")
        expect(shown.nth(i).locator("a").first).to_have_text(call_id)
    expect(page.locator("#live-toggle")).to_have_text("Pause")
    context.close()
