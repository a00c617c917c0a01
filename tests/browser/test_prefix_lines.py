"""The prefix line diff in Chromium: the demo's release put a timestamp line into the research
agent's system prompt; the regression card names that line, and the call view shows the line
that changed since the previous call."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.django_db


def test_it_shows_the_timestamp_line_on_the_regression_card(site, watched):
    page = watched.page
    page.goto(site.project_url("cache/"))
    card = page.locator("[data-regression]").first
    lines = card.locator("[data-testid=prefix-line-diff]")
    expect(lines).to_contain_text(re.compile(r"line \d+ of system (changed|added)"))
    expect(lines.locator("code").last).to_contain_text(re.compile(r"Current time: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))
    watched.shot("cache-prefix-lines")
    card.locator("text=the call where it crossed the threshold").click()
    expect(page).to_have_url(re.compile(r"/calls/research-\d+/step-\d+/"))
    assert watched.errors == []


def test_it_shows_the_changed_line_since_the_previous_call(site, watched):
    page = watched.page
    page.goto(site.project_url("runs/research-030/"))
    page.locator("#steps >> text=research-030").nth(3).click()
    diff = page.locator("[data-testid=prefix-line-diff]")
    expect(diff).to_contain_text(re.compile(r"line \d+ of system changed"))
    old, new = diff.locator("li").first.locator("code").all_inner_texts()
    assert old.startswith("Current time:") and new.startswith("Current time:") and old != new
    watched.shot("call-prefix-lines")
    assert watched.errors == []
