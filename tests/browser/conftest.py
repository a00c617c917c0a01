"""Browser tests: Playwright driving Debian's Chromium, headless, against a live server.

Playwright's own browser download does not work here: ``make browser`` (a dependency of
``make test``) installs Debian's chromium, and a missing one is a failure, never a skip.

The server is Django's LiveServerThread, started once per session; the demo world (built once
per process, tests/demo_world.py) is inserted once per module and committed, so the server
thread sees it. The
tests are marked ``django_db`` (so pytest-django sets the test database up) but only read
through the browser; what a test needs written is written by a module fixture, before the
test's transaction begins.
Screenshots go to test-artifacts/ (gitignored).
"""

from __future__ import annotations

import json
import os
import urllib.request

# Playwright's sync API runs an event loop in this thread; Django refuses database access
# from a thread with a running loop unless told this is deliberate.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.browser.chromium import CHROMIUM, CHROMIUM_ARGS, VIEWPORT
from tests.demo_world import World

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: run `make browser` (installs Debian's chromium)")
    from django.db import connections

    # Django keeps connections in asgiref Locals, which follow the running event loop; the
    # sync API starts one in this thread. Close what was opened outside it, and what was
    # opened inside it before leaving, so no session is left behind when PostgreSQL drops
    # the test database.
    connections.close_all()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()
        connections.close_all()


def _through_middleware(media_handler):
    # Unwrap the test server's media handler too: with MEDIA_URL unset it would answer
    # any path that names a file under the working directory, static files included.
    return media_handler.application


@pytest.fixture(scope="session")
def server(django_db_setup, django_db_blocker):
    """A live server thread on a free port. Not pytest-django's ``live_server``: that one
    makes every test transactional, and the flush after each test would wipe the data the
    module loaded once."""
    from django.db import connections
    from pytest_django.live_server_helper import LiveServer

    # Each request thread closes its database connection when the request ends, so none is
    # left open (PostgreSQL refuses to drop the test database while a session is open).
    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = 0
    # The server thread reads the database whenever the browser asks for a page: database
    # access stays allowed for the whole session (the blocker is process-wide).
    with django_db_blocker.unblock():
        live = LiveServer("127.0.0.1:0", start=False)
        # Static files go through the whole middleware stack (WhiteNoise and the static
        # gzip), as under `make run` and in production, not through the test server's
        # own uncompressed static handler: the JavaScript transfer test measures them.
        live.thread.static_handler = _through_middleware
        live.start()
        live._live_server_modified_settings.enable()
        yield live
        live._live_server_modified_settings.disable()
        live.stop()


@dataclass
class Site:
    url: str
    world: World
    state: dict = field(default_factory=dict)

    def project_url(self, path: str = "") -> str:
        return f"{self.url}/p/{self.world.project.slug}/{path}"


@dataclass
class Watched:
    """A page with the console errors, page errors and dialogs seen on it."""

    page: Page
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def charts(self, selector: str = "") -> int:
        """Number of Plotly SVG roots under ``selector``, after waiting for the first."""
        self.page.locator(f"{selector} .main-svg".strip()).first.wait_for(state="attached", timeout=15_000)
        return self.page.locator(f"{selector} .main-svg".strip()).count()


def post(site: Site, *manifests: dict) -> None:
    """Manifests through the real API over HTTP, as an agent sends them; all accepted."""
    body = json.dumps({"manifests": list(manifests)}).encode()
    request = urllib.request.Request(
        f"{site.url}/api/v1/manifests", data=body, method="POST",
        headers={"Authorization": f"Bearer {site.world.key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        report = json.loads(response.read())
    assert report["accepted"] == len(manifests), report


def login(page: Page, base: str, username: str, password: str) -> None:
    """Through the login form, as a person would (it is a CSRF-protected POST form)."""
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


@pytest.fixture(scope="module")
def site(server, demo_world, browser) -> Site:
    s = Site(url=server.url, world=demo_world)
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    login(page, s.url, demo_world.member.username, demo_world.password)
    s.state = context.storage_state()
    context.close()
    return s


@pytest.fixture(scope="module")
def owner_state(site, browser) -> dict:
    """A logged-in session of the project's owner (``site`` logs in its member)."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    login(page, site.url, site.world.owner.username, site.world.password)
    state = context.storage_state()
    context.close()
    return state


@pytest.fixture(scope="module")
def owner_pages(browser, owner_state):
    """Opens a browser context signed in as the project's owner, its CSP bypassed (axe is injected)."""
    def open_context(**options):
        return browser.new_context(storage_state=owner_state, bypass_csp=True, **options)
    return open_context


def watch(page: Page) -> Watched:
    w = Watched(page=page)
    page.on("console", lambda m: w.errors.append(f"console: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: w.errors.append(f"page error: {e}"))

    def on_dialog(dialog) -> None:
        w.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return w


@pytest.fixture
def watched(browser, site) -> Iterator[Watched]:
    context = browser.new_context(viewport=VIEWPORT, storage_state=site.state)
    yield watch(context.new_page())
    context.close()
