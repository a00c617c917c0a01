"""The project settings page in Chromium, for the owner, a member and an outsider.

The tests that write (through the live server: a new key, a login) are not marked
``django_db``: a test transaction held open here would lock SQLite against the server's
writes. The read-only one is marked, which is also what makes pytest-django set the
test database up when this module runs alone. The module's demo project
(tests/demo_world.py) is deleted when the module ends.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.chromium import VIEWPORT
from tests.browser.conftest import login, watch


def test_it_lets_the_owner_create_and_revoke_a_key_shown_once(site, browser, owner_state):
    context = browser.new_context(viewport=VIEWPORT, storage_state=owner_state)
    w = watch(context.new_page())
    page = w.page
    page.goto(site.project_url())
    page.click("nav.tabs a[data-nav=settings]")
    expect(page).to_have_url(re.compile(r"/settings/$"))
    page.fill("#key-form input[name=name]", "browser-agent")
    page.check("#key-form input[name=can_read]")
    page.click("#key-form button[type=submit]")
    raw = page.locator("#new-key-value").input_value()
    assert raw.startswith("ctx_")
    row = page.locator('#keys-table tr', has_text="browser-agent")
    expect(row).to_contain_text("ingest")
    expect(row).to_contain_text("read")
    w.shot("settings-new-key")
    page.goto(site.project_url("settings/"))
    assert raw not in page.content()
    page.locator('#keys-table tr', has_text="browser-agent").locator("button", has_text="Revoke").click()
    expect(page.locator("ul.messages")).to_contain_text("is revoked")
    expect(page.locator('#keys-table tr', has_text="browser-agent")).to_contain_text("revoked")
    # The webhook form with its threshold; the test button needs a URL first.
    expect(page.locator("#webhook-test-form button")).to_be_disabled()
    page.fill("#id_threshold_points", "12")
    page.click("#webhook-form button[type=submit]")
    expect(page.locator("ul.messages")).to_contain_text("Webhook settings saved")
    expect(page.locator("#id_threshold_points")).to_have_value("12.0")
    w.shot("settings")
    assert w.errors == []
    context.close()


@pytest.mark.django_db
def test_it_shows_a_member_the_settings_without_controls(site, watched):
    page = watched.page
    page.goto(site.project_url("settings/"))
    expect(page.locator("h1")).to_have_text("Project settings")
    expect(page.locator(".meta")).to_contain_text("Read only")
    expect(page.locator("main form")).to_have_count(0)
    expect(page.locator("#members-table")).to_contain_text(site.world.owner.username)
    assert watched.errors == []


def test_it_shows_an_outsider_nothing(site, browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    login(page, site.url, site.world.outsider.username, site.world.password)
    response = page.goto(site.project_url("settings/"))
    assert response.status == 404
    assert site.world.owner.username not in page.content()
    context.close()
