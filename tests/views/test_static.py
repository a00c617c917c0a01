"""plotly.js is ours to serve (offline, no CDN), and pages load scripts from our origin only."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from manifests.management.commands import vendor_plotly
from tests.html_page import parse


def test_it_serves_the_pinned_cartesian_plotly_bundle():
    assert vendor_plotly.problems(vendor_plotly.target()) == []
    call_command("vendor_plotly")


def test_it_refuses_a_vendored_plotly_that_is_not_the_pinned_bundle(tmp_path, settings):
    settings.BASE_DIR = tmp_path
    (tmp_path / "static" / "vendor").mkdir(parents=True)
    (tmp_path / "static" / "vendor" / "plotly.min.js").write_text("/** plotly.js v3.3.0 */")
    with pytest.raises(CommandError, match="sha256 differs"):
        call_command("vendor_plotly")


def test_it_covers_every_trace_type_the_pages_draw():
    # Each `type: "..."` a chart script passes to Plotly is a trace the cartesian bundle holds.
    scripts = Path(__file__).resolve().parents[2] / "static" / "ctxview"
    used = set()
    for js in scripts.glob("*.js"):
        used |= set(re.findall(r'\btype: "([a-z0-9]+)"', js.read_text()))
    traces = used - {"line", "rect", "multicategory", "category", "date", "linear", "log"}
    assert traces and traces <= set(vendor_plotly.TRACE_TYPES), traces
    bundle = vendor_plotly.target().read_text()
    for trace in vendor_plotly.TRACE_TYPES:
        assert f'moduleType:"trace",name:"{trace}"' in bundle, trace


@pytest.mark.django_db
def test_it_serves_static_files_gzipped():
    from django.test import Client

    r = Client().get("/static/vendor/plotly.min.js", HTTP_ACCEPT_ENCODING="gzip")
    assert r.status_code == 200
    assert r["Content-Encoding"] == "gzip"
    body = gzip.decompress(b"".join(r.streaming_content) if r.streaming else r.content)
    assert body == vendor_plotly.target().read_bytes()
    assert Client().get("/static/vendor/plotly.min.js").get("Content-Encoding") is None


@pytest.mark.django_db
def test_it_loads_scripts_and_styles_from_its_own_origin_only(demo_world):
    client = demo_world.client(demo_world.owner)
    slug = demo_world.project.slug
    for url in (f"/p/{slug}/", f"/p/{slug}/runs/", f"/p/{slug}/runs/refunds-budget-800/",
                f"/p/{slug}/calls/refunds-budget-800/step-6/", f"/p/{slug}/evidence/?key=rate_limit",
                f"/p/{slug}/cache/", f"/p/{slug}/compactions/"):
        body = client.get(url).content.decode()
        page = parse(body)
        sources = [e.get("src") for e in page.select("script[src]")]
        sources += [e.get("href") for e in page.select("link[href]")]
        assert "/static/vendor/plotly.min.js" in sources, url
        assert all(s.startswith("/static/") or s.startswith("data:") for s in sources), (url, sources)
        # No inline code: a script is a file, or data (json_script).
        assert all(s.get("src") or s.get("type") == "application/json" for s in page.select("script")), url
        r = client.get("/static/vendor/plotly.min.js")
        assert r.status_code == 200
