"""Long names in narrow places: a provider's response id as a call id, a session's run id, a model's
full name. They wrap, or their table scrolls in its own box, never the page, at 390 px and at
1280 px; a table that scrolls and holds no link gets a tab stop (static/ctxview/scroll_regions.js),
and axe finds no serious violation."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.browser.conftest import post
from tests.browser.test_a11y import DESKTOP, PHONE, serious_violations, settle
from tests.support import analyse_waiting, manifest

pytestmark = pytest.mark.django_db

RUN = "session-1a26dbf1-4ca7-420d-9a26-7ac8391756b6"
CALL = "msg_cc_standin_a7e6d4dfc9bd4eaa8d4733446b561f43"
MODEL = "claude-opus-5-5-" + "preview" * 12  # a full model name without a place to break
# Each page, and where the long id or name shows on it (the cache page's tables come from rollups
# that a worker makes later: checked for its width only).
PAGES = {"": f'a[href*="{CALL}"]', "calls/": f'a[href*="{CALL}"]', f"calls/?run={RUN}": f'a[href*="{CALL}"]',
         "evidence/": f'a[href*="{CALL}"]', f"runs/{RUN}/": f'p.meta:has-text("{MODEL}")', "cache/": None}


@pytest.fixture(scope="module")
def wide(site, django_db_blocker):
    post(site, manifest(CALL, run_id=RUN, model=MODEL, started_at=datetime.now(UTC)))
    with django_db_blocker.unblock():
        analyse_waiting()  # with a broker (CI's PostgreSQL run) no worker runs here
    return site


def _wider_than(page, width: int) -> list[str]:
    return page.evaluate("""(w) => [...document.querySelectorAll('body *')]
        .filter(e => e.getBoundingClientRect().right > w + 1).slice(0, 6)
        .map(e => e.tagName + '#' + e.id + '.' + e.className)""", width)


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1280px"])
def test_it_keeps_long_ids_and_names_inside_the_page(wide, owner_pages, viewport):
    phone = viewport is PHONE
    context = owner_pages(viewport=viewport, is_mobile=phone, has_touch=phone)
    page = context.new_page()
    found = {}
    for path, shown in PAGES.items():
        page.goto(wide.project_url(path))
        settle(page)
        assert shown is None or page.locator(shown).count(), path
        width = page.evaluate("document.documentElement.scrollWidth")
        violations = serious_violations(page)
        if width > viewport["width"] or violations:
            found[path] = (width, _wider_than(page, viewport["width"]), violations)
    context.close()
    assert found == {}, json.dumps(found, indent=1)


def test_it_gives_a_table_that_scrolls_without_a_link_a_tab_stop_only_while_it_scrolls(wide, owner_pages):
    context = owner_pages(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(wide.project_url("cache/"))
    settle(page)
    table = page.locator("#miss-cost")  # the model's full name, no link: it scrolls in its box
    assert table.evaluate("t => t.scrollWidth > t.clientWidth")
    assert table.get_attribute("tabindex") == "0"
    table.focus()
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => document.querySelector('#miss-cost').scrollLeft > 0")  # scrolled by the key
    assert page.locator("#by-agent-model").get_attribute("tabindex") is None  # it holds links
    page.set_viewport_size(DESKTOP)
    page.wait_for_function("() => !document.querySelector('#miss-cost').hasAttribute('tabindex')")
    context.close()


def test_it_gives_a_table_a_script_fills_a_tab_stop_once_it_scrolls(site, owner_pages):
    context = owner_pages(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(site.project_url("calls/refunds-budget-800/step-6/"))
    settle(page)
    # The what-if replay fills its tables after the page loaded: wider than a phone, and no link.
    page.locator("#whatif-items tbody tr").first.wait_for(state="attached", timeout=15_000)
    assert page.locator("#whatif-items").evaluate("t => t.scrollWidth > t.clientWidth")
    page.wait_for_function("() => document.querySelector('#whatif-items').getAttribute('tabindex') === '0'")
    assert serious_violations(page) == []
    context.close()
