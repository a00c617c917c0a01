"""Markers for the whole suite (tests/ and sdk/tests/), applied from what a test is, not by hand.

``browser``: under tests/browser/. ``live``: uses a server or worker running outside the
test's own thread (Django's live server, the browser tests' server thread, a Celery worker
process) or sits in a ``test_*_live.py`` module (gunicorn). ``fuzz``: driven by hypothesis.
``make test-fast`` deselects the three; ``make test`` runs everything (pytest.ini registers them).

Under pytest-xdist (``--dist loadgroup``, the Makefile's), the tests of a module whose module
fixture costs seconds stay in one process, so it is set up once per module rather than once
per module and process: the browser tests' logged-in ``site`` (a login through Chromium, and
what the module adds to the demo) and ``seeded`` (``seed_demo`` run twice). The demo world
itself is built once per process and inserted per module in about a second (tests/demo_world.py):
its modules spread over the processes like any other.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
BROWSER_DIR = ROOT / "tests" / "browser"
# Fixtures that start (or hand the test) a server or worker of their own.
LIVE_FIXTURES = frozenset({"live_server", "server", "workers"})
# Module-scoped fixtures expensive enough to keep their module's tests together.
MODULE_WORLDS = frozenset({"site", "seeded"})


def pytest_configure(config: pytest.Config) -> None:
    # ctxkit's proxy and instrument() spool to a per-user folder by default ($XDG_STATE_HOME):
    # the suite's, and the processes it starts, use a temporary one instead of the user's.
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="ctxkit-state-")


# First: xdist's own hook reads the xdist_group markers to assign the tests to processes.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(item.path)
        if path.is_relative_to(BROWSER_DIR):
            item.add_marker(pytest.mark.browser)
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & LIVE_FIXTURES or path.stem.endswith("_live"):
            item.add_marker(pytest.mark.live)
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.fuzz)
        if fixtures & MODULE_WORLDS and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
