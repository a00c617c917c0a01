"""Costs in US dollars beside relative units on the pages, and the window a recorded manifest
states: a claude-opus-5-5 call that ctxkit recorded without a window is priced as genai-prices
prices it and measured against its 1,000,000-token window."""

from __future__ import annotations

from datetime import UTC, datetime

import genai_prices
import pytest
from django.test import Client

from ctxkit.manifest import Outcome, Usage
from ctxkit.models import format_usd
from ctxkit.record.call_items import Part, call_manifest
from manifests.models import AlertRule
from tests.analysis.support import flush_rollups
from tests.html_page import parse
from tests.support import store_and_analyse

pytestmark = pytest.mark.django_db

AT = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
USAGE = Usage(input_tokens=120_000, cache_read_tokens=100_000, cache_write_tokens=15_000,
              cache_write_1h_tokens=15_000, output_tokens=900)


def texts(body: str) -> dict[str, str]:
    """The text of every element that has an id, by id (nested ones included)."""
    return {e.get("id") or "": e.text for e in parse(body).select("[id]")}


def recorded(call_id: str, model: str, outcome: Outcome | None = None):
    """A manifest as ctxkit records a plain call: no window passed."""
    return call_manifest(call_id=call_id, run_id="cc-run", step=int(call_id[-1]), model=model, provider="anthropic",
                         agent="claude-code", started_at=AT, ended_at=None, usage=USAGE, outcome=outcome,
                         parts=[Part(role="system", text="You are Claude Code."), Part(role="user", text="fix it")])


def page(user, url: str) -> dict[str, str]:
    client = Client()
    client.force_login(user)
    r = client.get(url, {"range": "all"})
    assert r.status_code == 200
    return texts(r.content.decode())


def test_it_shows_a_calls_cost_in_usd_and_units_and_the_tables_window(project, member):
    call = store_and_analyse(project, [recorded("cc-step-0", "claude-opus-5-5")])[0]
    assert call.window == 1_000_000
    theirs = float(genai_prices.calc_price(
        genai_prices.Usage(input_tokens=120_000, cache_read_tokens=100_000, cache_write_tokens=15_000,
                           cache_write_1h_tokens=15_000, output_tokens=900),
        "claude-opus-5-5", genai_request_timestamp=AT).total_price)
    assert call.figures.cost_usd == pytest.approx(theirs, rel=1e-9)
    shown = page(member, f"/p/{project.slug}/calls/cc-step-0/")
    assert shown["cost-usd"] == format_usd(theirs)
    assert shown["cost-units"] == f"{call.figures.cost:.3f}"
    assert "window-assumed" not in shown


def test_it_flags_an_assumed_window_and_a_model_without_usd_price(project, member):
    store_and_analyse(project, [recorded("cc-step-1", "claude-internal-preview")])
    shown = page(member, f"/p/{project.slug}/calls/cc-step-1/")
    assert shown["window-assumed"] == "window assumed"
    assert shown["cost-usd"] == "–" and float(shown["cost-units"]) > 0


def test_it_adds_up_usd_on_the_run_page_and_the_overview(project, member):
    calls = store_and_analyse(project, [recorded("cc-step-0", "claude-opus-5-5"),
                                        recorded("cc-step-1", "claude-internal-preview")])
    flush_rollups()
    usd = calls[0].figures.cost_usd
    run = page(member, f"/p/{project.slug}/runs/cc-run/")
    assert run["run-cost-usd"] == format_usd(usd)
    assert run["run-unpriced"].startswith("1 call without")
    client = Client()
    client.force_login(member)
    cards = {c["key"]: c["value"] for c in client.get(f"/p/{project.slug}/", {"range": "all"}).context["cards"]}
    assert cards["cost_usd"] == pytest.approx(usd, rel=1e-6)
    assert cards["cost"] == pytest.approx(sum(c.figures.cost for c in calls), rel=1e-6)


def test_it_fires_a_usd_cost_per_success_rule(project):
    from manifests.alerts.evaluate import describe
    from manifests.alerts.measure import measure

    calls = store_and_analyse(project, [recorded("cc-step-0", "claude-opus-5-5", Outcome(verified="yes")),
                                        recorded("cc-step-1", "claude-opus-5-5", Outcome(verified="no"))])
    flush_rollups()
    rule = AlertRule.objects.create(project=project, kind=AlertRule.COST_USD_PER_SUCCESS_ABOVE, threshold=0.01,
                                    window_hours=6)
    assert describe(rule).startswith("cost per verified success above $0.0100")
    # Both calls' dollars over the one verified success.
    measured = measure(rule, AT.replace(hour=12))
    assert measured.value == pytest.approx(sum(c.figures.cost_usd for c in calls), rel=1e-6)
    assert measured.holds is True
    rule.threshold = 10.0
    assert measure(rule, AT.replace(hour=12)).holds is False
