"""Check the vendored plotly.js: the cartesian partial bundle, pinned by digest.

The dashboard must work offline: plotly.js is served from our own static files, never
from a CDN, and nothing is downloaded at run time. ``static/vendor/plotly.min.js`` is
``plotly-cartesian.min.js`` of the npm package ``plotly.js-cartesian-dist-min`` (the
trace types every chart here uses: bar, scatter, heatmap; category, multicategory and
date axes), much smaller than the full bundle. To move to another release, run
``npm pack plotly.js-cartesian-dist-min@<version>``, copy ``package/plotly-cartesian.min.js``
over the file and update VERSION and SHA256 below (``make browser`` runs this check).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

PACKAGE = "plotly.js-cartesian-dist-min"
VERSION = "3.4.0"
SHA256 = "950d4b7a827cd446e5cfcb125b33fe56bf2ddb9900fd2d4cf7035829f73eae43"
# The trace types the dashboard's charts use; each must be registered in the bundle.
TRACE_TYPES = ("bar", "scatter", "heatmap")


def target() -> Path:
    return Path(settings.BASE_DIR) / "static" / "vendor" / "plotly.min.js"


def problems(path: Path) -> list[str]:
    if not path.exists():
        return [f"{path} is missing"]
    body = path.read_bytes()
    found = []
    if hashlib.sha256(body).hexdigest() != SHA256:
        found.append(f"{path} is not {PACKAGE}@{VERSION} (sha256 differs)")
    head = body[:200].decode("ascii", "replace")
    if f"(cartesian - minified) v{VERSION}" not in head:
        found.append(f"{path} does not announce the cartesian bundle v{VERSION}")
    return found


class Command(BaseCommand):
    help = "Check that static/vendor/plotly.min.js is the pinned plotly.js cartesian bundle."

    def handle(self, *args: str, **options: Any) -> None:
        found = problems(target())
        if found:
            raise CommandError("; ".join(found) + f": run `npm pack {PACKAGE}@{VERSION}` and copy "
                               "package/plotly-cartesian.min.js to static/vendor/plotly.min.js")
        self.stdout.write(f"{target()} is {PACKAGE}@{VERSION}")
