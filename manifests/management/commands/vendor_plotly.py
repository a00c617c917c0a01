"""Copy plotly.js from the installed ``plotly`` package into static/vendor/.

The dashboard must work offline: plotly.js is served from our own static files, never
from a CDN. ``make test`` and ``make run`` keep the copy in step with the pinned package;
a test fails when the two differ.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import plotly
from django.conf import settings
from django.core.management.base import BaseCommand

SOURCE = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def target() -> Path:
    return Path(settings.BASE_DIR) / "static" / "vendor" / "plotly.min.js"


class Command(BaseCommand):
    help = "Copy plotly.min.js from the installed plotly package into static/vendor/."

    def handle(self, *args, **options):
        dest = target()
        if dest.exists() and dest.read_bytes() == SOURCE.read_bytes():
            self.stdout.write(f"{dest} is up to date (plotly {plotly.__version__})")
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SOURCE, dest)
        self.stdout.write(f"copied plotly.js of plotly {plotly.__version__} to {dest}")
