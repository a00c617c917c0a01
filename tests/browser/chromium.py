"""Where Debian's Chromium is and how it is started (shared by the tests and the docs script)."""

from __future__ import annotations

import os

CHROMIUM = os.environ.get("CTXVIEW_CHROMIUM", "/usr/bin/chromium")
# Headless, as root, on a machine with no network beyond loopback: without the
# background-networking flags Chromium keeps trying to reach Google's hosts.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
