"""The dashboard's pages, registered once. The nav (templates/base.html) draws its tabs from
this registry, and each page's view renders under its entry's name (views/common.py's
``page``), which says which tab the page lights. A page missing here fails
tests/views/test_registry.py, which walks the URLs under a project's.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    name: str  # what its view renders under; a tab's data-nav
    url_name: str  # its URL pattern's name (ctxview/urls.py); the URL takes the project's slug
    tab: str  # the tab it lights: its own name for a tab, another tab's, or "" for none
    label: str = ""  # the tab's text; empty for a page that is not a tab
    filters: bool = True  # it takes the filter bar, so its tab's link carries the URL's filters
    members_only: bool = False  # its tab is shown to owners and members, not to viewers


PAGES = (
    Page("overview", "overview", "overview", "Overview"),
    Page("runs", "project-runs", "runs", "Runs"),
    Page("live", "live", "live", "Live"),
    Page("evidence", "evidence", "evidence", "Evidence"),
    Page("cache", "cache", "cache", "Cache"),
    Page("compactions", "compactions", "compactions", "Compactions"),
    Page("settings", "project-settings", "settings", "Settings", filters=False, members_only=True),
    Page("run", "run-detail", "runs"),
    Page("calls", "calls", "runs"),
    Page("call", "call-detail", "runs"),
    Page("compare", "compare", "runs"),
    Page("search", "search", ""),
)
BY_NAME = {p.name: p for p in PAGES}
# The nav's tabs, in order.
TABS = [p for p in PAGES if p.label]

# The URLs under a project's that are no page: JSON for the pages' scripts, downloads, and the
# settings page's form posts (each answers with the settings page or a redirect to it).
ENDPOINTS = frozenset({
    "live-feed", "call-whatif", "export",
    "settings-create-key", "settings-revoke-key", "settings-invite", "settings-member", "settings-webhook",
    "settings-webhook-test", "settings-alert-create", "settings-alert-delete", "settings-fact-create",
    "settings-fact-delete",
})
