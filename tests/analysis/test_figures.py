"""Per-call figures and the price table."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps as django_apps

from ctxkit.manifest import Evidence, Usage
from manifests.analysis.prices import DEFAULT_PRICE, Price, PriceBook
from manifests.models import CallFigures, ModelPrice
from tests.analysis.support import item
from tests.support import manifest, store_and_analyse

pytestmark = pytest.mark.django_db


def figures_of(project, **kwargs) -> CallFigures:
    return store_and_analyse(project, [manifest("c1", bare=True, **kwargs)])[0].figures


def test_it_computes_token_and_window_figures(project):
    items = [
        item("system", kind="system", tokens=300, zone="head"),
        item("tools", kind="tools", tokens=900, zone="head"),
        item("page", kind="retrieval", tokens=500, trust="untrusted"),
        item("log", kind="tool_result", action="truncate", tokens=300, requested=1200, trust="untrusted"),
        item("old", kind="history", action="drop", tokens=400),
    ]
    f = figures_of(project, items=items, budget={"window": 8000},
                   usage=Usage(input_tokens=2000, cache_read_tokens=1200, cache_write_tokens=300, output_tokens=250))
    assert f.context_tokens == 300 + 900 + 500 + 300  # the dropped item takes no room
    assert f.uncached_input_tokens == 2000 - 1200 - 300
    assert f.cache_hit_ratio == pytest.approx(0.6)
    assert f.window_utilization == pytest.approx(2000 / 8000)
    assert f.effective_limit == 2000  # a quarter of the window by default
    assert f.effective_share == pytest.approx(1.0)
    assert f.headroom_tokens == 8000 - 2000  # ctxkit records no reserve without a plan
    assert f.reserve_share == 0
    assert f.tool_tokens == 900 and f.tool_share == pytest.approx(900 / 2000)
    assert f.untrusted_tokens == 800
    # Relative units: 500 uncached x 1 + 1200 read x 0.1 + 300 written x 1.25 + 250 out x 4, per 1k.
    assert f.cost == pytest.approx((500 * 1 + 1200 * 0.1 + 300 * 1.25 + 250 * 4) / 1000)
    assert f.evidence_coverage is None  # no required evidence: no coverage, not 0 or 1
    assert f.started_at == f.call.started_at


def test_it_measures_the_reserve_and_headroom_from_the_budget(project):
    body = manifest("c1", bare=True, items=[item("a", tokens=100)], usage=Usage(input_tokens=6000))
    body["budget"] = {"window": 8000, "output_reserve": 1000, "safety_margin": 200}
    f = store_and_analyse(project, [body])[0].figures
    assert f.reserve_share == pytest.approx(1000 / 8000)
    assert f.headroom_tokens == 6800 - 6000
    assert f.effective_share == pytest.approx(6000 / 2000)  # three times the effective limit


def test_it_counts_duplicates_among_the_candidates(project):
    items = [
        item("a", tokens=100, content_hash="h1"),
        item("b", tokens=100, content_hash="h1"),  # same content, reached the model too
        item("c", action="dedupe", tokens=200, content_hash="h2"),
        item("d", tokens=600, content_hash="h3"),
    ]
    f = figures_of(project, items=items)
    assert f.duplicate_ratio == pytest.approx((100 + 200) / 1000)
    assert f.duplicate_context_tokens == 100


def test_it_computes_evidence_coverage_and_positions(project):
    items = [item("head", kind="system", tokens=100), item("doc", tokens=200), item("tail", kind="user", tokens=100)]
    evidence = [
        Evidence(key="in-doc", expected_item="doc", present=True, found_in="doc"),
        Evidence(key="in-tail", expected_item="tail", present=True, found_in="tail"),
        Evidence(key="missing", expected_item="doc", present=False),
    ]
    f = figures_of(project, items=items, evidence=evidence)
    assert f.evidence_coverage == pytest.approx(2 / 3)
    # By token offset of the item's middle: doc spans 100..300 of 400, tail 300..400.
    assert f.evidence_positions == {"in-doc": 0.5, "in-tail": 0.875}


def test_it_uses_the_most_specific_price_row(project):
    ModelPrice.objects.create(model_pattern="claude-*", input_per_1k=3, output_per_1k=15, effective_limit_ratio=0.5)
    ModelPrice.objects.create(model_pattern="claude-sonnet-4-5", input_per_1k=2, output_per_1k=10,
                              effective_limit_ratio=0.1)
    f = figures_of(project, items=[item("a")], usage=Usage(input_tokens=1000, output_tokens=100))
    assert f.cost == pytest.approx((1000 * 2 + 100 * 10) / 1000)
    assert f.effective_limit == 800
    other = store_and_analyse(project, [manifest("c2", bare=True, model="claude-haiku-4-5", items=[item("a")],
                                                 usage=Usage(input_tokens=1000, output_tokens=100))])[0].figures
    assert other.cost == pytest.approx((1000 * 3 + 100 * 15) / 1000)
    assert other.effective_limit == 4000


def test_it_falls_back_to_the_default_prices_when_no_row_matches():
    book = PriceBook([("gpt-*", Price(input_per_1k=9))])
    assert book.for_model("claude-sonnet-4-5") == DEFAULT_PRICE
    assert book.for_model("gpt-5") == Price(input_per_1k=9)
    assert DEFAULT_PRICE == Price(1.0, 4.0, 0.1, 1.25, 300, 1024, 0.25)


def test_it_ships_a_default_row_in_the_price_table():
    migration = importlib.import_module("manifests.migrations.0002_analysis")
    ModelPrice.objects.filter(model_pattern="*").delete()  # a transactional test may have flushed it
    migration.default_price_row(django_apps, None)
    row = ModelPrice.objects.get(model_pattern="*")
    assert (row.input_per_1k, row.output_per_1k, row.cache_read_per_1k, row.cache_write_per_1k) == (1, 4, 0.1, 1.25)
    assert (row.cache_ttl_seconds, row.min_cacheable_tokens, row.effective_limit_ratio) == (300, 1024, 0.25)


def test_it_lets_an_admin_edit_the_price_table(admin_client):
    row = ModelPrice.objects.create(model_pattern="gpt-5*")
    page = admin_client.get("/admin/manifests/modelprice/")
    assert page.status_code == 200 and b"gpt-5*" in page.content
    form = {
        "model_pattern": "gpt-5*", "input_per_1k": "1.5", "output_per_1k": "6", "cache_read_per_1k": "0.15",
        "cache_write_per_1k": "0", "cache_ttl_seconds": "600", "min_cacheable_tokens": "1024",
        "effective_limit_ratio": "0.2",
    }
    response = admin_client.post(f"/admin/manifests/modelprice/{row.pk}/change/", form)
    assert response.status_code == 302, response.content[:2000]
    row.refresh_from_db()
    assert (row.input_per_1k, row.cache_ttl_seconds) == (1.5, 600)


def test_it_refuses_a_bad_price_row_in_the_admin_naming_the_field(admin_client):
    row = ModelPrice.objects.create(model_pattern="gpt-5*")
    form = {
        "model_pattern": "gpt-5*", "input_per_1k": "-1", "output_per_1k": "6", "cache_read_per_1k": "0.15",
        "cache_write_per_1k": "0", "cache_ttl_seconds": "600", "min_cacheable_tokens": "1024",
        "effective_limit_ratio": "0",
    }
    response = admin_client.post(f"/admin/manifests/modelprice/{row.pk}/change/", form)
    body = response.content.decode()
    assert response.status_code == 200
    assert "must be a price per 1k tokens in relative units, 0 to" in body and "must be a share of the window" in body
    listed = {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-id": str(row.pk), "_save": "Save",
              "form-0-input_per_1k": "2", "form-0-output_per_1k": "6", "form-0-cache_read_per_1k": "0.1",
              "form-0-cache_write_per_1k": "1", "form-0-cache_ttl_seconds": "600",
              "form-0-min_cacheable_tokens": "1024", "form-0-effective_limit_ratio": "5"}
    response = admin_client.post("/admin/manifests/modelprice/", listed)
    assert response.status_code == 200 and "must be a share of the window" in response.content.decode()
    row.refresh_from_db()
    assert (row.input_per_1k, row.effective_limit_ratio) == (1.0, 0.25)


def test_it_stores_the_usd_cost_genai_prices_calculates(project):
    import genai_prices

    usage = Usage(input_tokens=90_000, cache_read_tokens=60_000, cache_write_tokens=20_000,
                  cache_write_1h_tokens=15_000, output_tokens=2_000)
    m = manifest("c1", bare=True, model="claude-opus-5-5", usage=usage, budget={"window": 1_000_000})
    call = store_and_analyse(project, [m])[0]
    theirs = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=90_000, cache_read_tokens=60_000, cache_write_tokens=20_000,
                           cache_write_1h_tokens=15_000, output_tokens=2_000),
        "claude-opus-5-5", genai_request_timestamp=call.started_at).total_price
    assert call.cache_write_1h_tokens == 15_000
    assert call.figures.cost_usd == pytest.approx(float(theirs), rel=1e-9)
    # The relative cost stays in units of the price row, beside it.
    assert call.figures.cost == pytest.approx(
        (10_000 * 1 + 60_000 * 0.1 + 20_000 * 1.25 + 2_000 * 4) / 1000)


def test_it_takes_a_price_rows_usd_columns_over_the_table(project):
    ModelPrice.objects.create(model_pattern="claude-opus-5-5", input_usd_per_mtok=3, cache_read_usd_per_mtok=0.1)
    ModelPrice.objects.create(model_pattern="house-*", input_usd_per_mtok=1, output_usd_per_mtok=2)
    usage = Usage(input_tokens=10_000, cache_read_tokens=4_000, cache_write_tokens=1_000, output_tokens=500)
    opus, house, unknown = store_and_analyse(project, [
        manifest("c1", bare=True, model="claude-opus-5-5", usage=usage),
        manifest("c2", bare=True, model="house-model", usage=usage),
        manifest("c3", bare=True, model="mystery-model", usage=usage),
    ])
    # Input and cache reads from the row; writes and output the table's ($5 and $20 per million).
    assert opus.figures.cost_usd == pytest.approx((5_000 * 3 + 4_000 * 0.1 + 1_000 * 5 + 500 * 20) / 1e6)
    # A model the table does not know: the row's prices, reads and writes at the input price.
    assert house.figures.cost_usd == pytest.approx((10_000 * 1 + 500 * 2) / 1e6)
    assert unknown.figures.cost_usd is None and unknown.figures.cost > 0
    assert Price(input_usd_per_mtok=1).usd(None) is None  # no output price: no USD cost


def test_it_lets_an_admin_set_a_usd_price_and_refuses_a_bad_one(admin_client):
    row = ModelPrice.objects.create(model_pattern="house-*")
    form = {
        "model_pattern": "house-*", "input_per_1k": "1", "output_per_1k": "4", "cache_read_per_1k": "0.1",
        "cache_write_per_1k": "1.25", "cache_ttl_seconds": "300", "min_cacheable_tokens": "1024",
        "effective_limit_ratio": "0.25", "input_usd_per_mtok": "2.5", "output_usd_per_mtok": "",
    }
    response = admin_client.post(f"/admin/manifests/modelprice/{row.pk}/change/", form)
    assert response.status_code == 302, response.content[:2000]
    row.refresh_from_db()
    assert (row.input_usd_per_mtok, row.output_usd_per_mtok) == (2.5, None)
    response = admin_client.post(f"/admin/manifests/modelprice/{row.pk}/change/", {**form, "output_usd_per_mtok": "-3"})
    assert response.status_code == 200
    assert "must be a price in US dollars per million tokens" in response.content.decode()
