"""The registry of dashboard pages (manifests/views/registry.py): every page under a project's
URL is in it, and the nav draws its tabs from it, lighting the tab of the page shown."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, path, reverse

from manifests import services
from manifests.models import Membership
from manifests.views import registry
from tests.html_page import parse

PROJECT_URL = "p/<slug:slug>/"


def unregistered(patterns: list[URLPattern | URLResolver]) -> list[str]:
    """The names of the URLs under a project's that are neither a registered page nor a
    registered endpoint."""
    known = {p.url_name for p in registry.PAGES} | registry.ENDPOINTS
    return sorted(str(p.name) for p in patterns if isinstance(p, URLPattern)
                  and str(p.pattern).startswith(PROJECT_URL) and p.name not in known)


def test_it_registers_every_page_under_a_project():
    assert len([p for p in get_resolver().url_patterns if str(p.pattern).startswith(PROJECT_URL)]) > 20
    assert unregistered(get_resolver().url_patterns) == []
    for page in registry.PAGES:
        reverse(page.url_name, args=["slug", "id"][:1 + page.url_name.endswith("-detail")])
        assert page.tab in registry.BY_NAME or page.tab == "", page


def test_it_would_find_a_page_missing_from_the_registry():
    def view():
        raise AssertionError

    patterns = [path("p/<slug:slug>/new/", view, name="new-page"), path("p/<slug:slug>/runs/", view,
                                                                          name="project-runs"),
                path("elsewhere/", view, name="elsewhere")]
    assert unregistered(patterns) == ["new-page"]


def tabs_of(body: str) -> list[tuple[str, str, bool]]:
    """The nav's tabs: (data-nav, href, lit)."""
    return [(a.get("data-nav") or "", a.get("href") or "", a.get("aria-current") == "page")
            for a in parse(body).select("nav.tabs a")]


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["overview", "runs", "live", "evidence", "cache", "compactions", "settings", "calls",
                                  "search"])
def test_it_lights_the_tab_of_each_page_and_links_every_tab(project, owner, name):
    c = Client()
    c.force_login(owner)
    page = registry.BY_NAME[name]
    query = "?agent=researcher" if page.filters else ""
    body = c.get(reverse(page.url_name, args=[project.slug]) + query + ("&q=x" if name == "search" else "")).content
    tabs = tabs_of(body.decode())
    assert [t for t, _, _ in tabs] == [t.name for t in registry.TABS]
    assert [t for t, _, lit in tabs if lit] == ([page.tab] if page.tab else [])
    for tab, (key, href, _) in zip(registry.TABS, tabs, strict=True):
        carried = "?agent=researcher" if tab.filters and page.filters else ""
        assert href == reverse(tab.url_name, args=[project.slug]) + carried, key


@pytest.mark.django_db
def test_it_shows_the_settings_tab_to_owners_and_members_only(project, member):
    viewer = get_user_model().objects.create_user("vera", password="password-vera")
    services.add_member(project=project, user=viewer, role=Membership.VIEWER)
    for user, shown in ((member, True), (viewer, False)):
        c = Client()
        c.force_login(user)
        keys = [key for key, _, _ in tabs_of(c.get(reverse("overview", args=[project.slug])).content.decode())]
        assert ("settings" in keys) is shown and keys[:6] == ["overview", "runs", "live", "evidence", "cache",
                                                              "compactions"]
