"""plotly.js is ours to serve (offline, no CDN), and pages load scripts from our origin only."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

from manifests.management.commands import vendor_plotly
from tests.views_support import demo_world_fixture  # noqa: F401


def test_it_serves_the_plotly_of_the_installed_package():
    assert vendor_plotly.target().read_bytes() == vendor_plotly.SOURCE.read_bytes(), (
        "static/vendor/plotly.min.js differs from the installed plotly package: run "
        "`python manage.py vendor_plotly`")


def test_it_refreshes_the_vendored_copy(tmp_path, settings, capsys):
    settings.BASE_DIR = tmp_path
    call_command("vendor_plotly")
    assert (tmp_path / "static" / "vendor" / "plotly.min.js").read_bytes() == vendor_plotly.SOURCE.read_bytes()
    call_command("vendor_plotly")
    assert "up to date" in capsys.readouterr().out


@pytest.mark.django_db
def test_it_loads_scripts_and_styles_from_its_own_origin_only(demo_world):
    client = demo_world.client(demo_world.owner)
    slug = demo_world.project.slug
    for url in (f"/p/{slug}/", f"/p/{slug}/runs/", f"/p/{slug}/runs/refunds-budget-800/",
                f"/p/{slug}/calls/refunds-budget-800/step-6/", f"/p/{slug}/evidence/?key=rate_limit",
                f"/p/{slug}/cache/", f"/p/{slug}/compactions/"):
        body = client.get(url).content.decode()
        sources = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', body)
        assert "/static/vendor/plotly.min.js" in sources, url
        assert all(s.startswith("/static/") or s.startswith("data:") for s in sources), (url, sources)
        assert not re.search(r"<script>(?!\s*</script>)", body), url  # no inline code; data via json_script
        r = client.get("/static/vendor/plotly.min.js")
        assert r.status_code == 200
