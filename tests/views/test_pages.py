"""Overview, runs, run, evidence triage, cache and compaction review on the demo data."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client

from manifests import analysis, ingest
from manifests.models import Call, Item
from manifests.selectors import cache as cache_sel
from manifests.selectors import compactions as compaction_sel
from tests.html_page import Element, parse
from tests.support import manifest

pytestmark = pytest.mark.django_db


def body_of(world, path: str) -> str:
    r = world.client(world.owner).get(f"/p/{world.project.slug}/{path}")
    assert r.status_code == 200, path
    return r.content.decode()


def script_json(body: str, element_id: str):
    return json.loads(parse(body).one(f'script#{element_id}[type="application/json"]').text)


def links(element: Element) -> list[str]:
    return [a.get("href") or "" for a in element.select("a[href]")]


def test_it_shows_headline_figures_and_links_to_the_three_questions(demo_world):
    page = parse(body_of(demo_world, ""))
    calls = Call.objects.filter(project=demo_world.project).count()
    cards = {c.get("data-card"): c for c in page.select("[data-card]")}
    assert cards["calls"].one(".value").text == f"{calls:,}"  # 1,274: thousands separated
    assert re.fullmatch(r"\d+\.\d%", cards["hit_rate"].one(".value").text)
    assert "vs" in cards["calls"].text  # against the previous period
    # Question 1: a missing evidence links to its call.
    q1 = page.one("#q-evidence")
    assert any("/calls/" in href for href in links(q1)) and "Evidence triage" in q1.text
    # Question 2: the regression, with the segment that changed, links to its call.
    q2 = page.one("#q-cache")
    assert "prefix_changed: system changed" in q2.text and any("/calls/research-" in h for h in links(q2))
    # Question 3: the failed invariant links to the filtered compaction review.
    assert any("compactions/?failed=user_constraints" in href for href in links(page.one("#q-compactions")))


def test_it_passes_the_chart_data_of_the_overview(demo_world):
    data = script_json(body_of(demo_world, "?range=24h"), "overview-data")
    assert data["bucket"] == "hour" and len(data["x"]) >= 10
    assert {"system", "tools", "history"} <= set(data["by_kind"])
    rates = [r for r in data["hit_rate"] if r is not None]
    assert max(rates) > 0.7 and rates[-1] < 0.1  # the release broke the cache
    assert data["regressions"] and data["regressions"][0]["segment"] == "system"
    assert any(data["prefix_changes"])
    assert "compaction" in data["causes"]


def test_it_lists_runs_with_their_figures(demo_world):
    body = body_of(demo_world, "runs/")
    page = parse(body)
    row = page.one('tr[data-run="refunds-budget-800"]')
    assert "7" in [td.text for td in row.select("td")]  # calls
    assert row.select(".missing")  # evidence missing
    row = page.one('tr[data-run="coder-list-endpoint"]')
    assert "1" in [span.text for span in row.select("span.missing")]  # one failed compaction
    runs = script_json(body, "runs-data")
    assert all(r["url"].startswith(f"/p/{demo_world.project.slug}/runs/") for r in runs)


def test_it_draws_each_step_of_a_run(demo_world):
    body = body_of(demo_world, "runs/coder-list-endpoint/")
    data = script_json(body, "run-data")
    assert data["steps"] == list(range(9))
    assert data["window"] == [3000] * 9 and data["input_cap"] == [2400] * 9
    assert all(v > 0 for v in data["effective_limit"])
    assert [c["step"] for c in data["compactions"]] == [6] and "1 invariant(s) failed" in data["compactions"][0]["text"]
    assert data["urls"][6].endswith("/calls/coder-list-endpoint/step-6/")
    approval = script_json(body_of(demo_world, "runs/research-approval/"), "run-data")
    assert approval["cause"][4] == "ttl_expired"  # after the approval pause
    assert approval["cause"][5] == "hit"


def test_it_finds_evidence_by_key_label_ref_and_content_hash(demo_world):
    body = body_of(demo_world, "evidence/?q=rate_limit")
    assert "rate_limit" in parse(body).one("#search-keys").text
    assert "rate_limit" in body_of(demo_world, "evidence/?q=429 rate")  # by label
    assert "refunds-budget-800/step-6" in body_of(demo_world, "evidence/?q=log%23sha256:4be1c0d2")  # by ref
    digest = Item.objects.filter(project=demo_world.project, item_id="web_page").values_list(
        "content_hash", flat=True).first()
    found = body_of(demo_world, f"evidence/?q={digest}")
    assert "research-vendor-page" in parse(found).one("#search-items").text


def test_it_shows_the_timeline_of_one_evidence_across_a_run(demo_world):
    body = body_of(demo_world, "evidence/?key=rate_limit&run=refunds-budget-800")
    rows = {tr.get("data-step"): tr for tr in parse(body).select("tr[data-step]")}
    assert "not declared" in rows["2"].text  # the 429 happened at step 3
    assert rows["3"].one(".present").text == "yes"
    assert rows["6"].one(".missing").text == "no" and "summarize" in rows["6"].text
    chart = script_json(body, "timeline-data")
    assert chart["steps"] == [3, 4, 5, 6] and chart["z"][chart["stages"].index("present")] == [1, 1, 1, 0]
    # Without a run, the latest run where it went missing is shown.
    assert "across run <a" in body_of(demo_world, "evidence/?key=rate_limit")


def test_it_breaks_the_causes_down_with_example_calls(demo_world):
    body = body_of(demo_world, "evidence/")
    causes = {tr.get("data-cause"): tr for tr in parse(body).select("tr[data-cause]")}
    assert "compaction" in causes and any("/calls/" in href for href in links(causes["compaction"]))
    assert "most-missing" in body


def test_it_shows_the_cache_by_agent_and_model_and_the_regression_diff(demo_world):
    body = body_of(demo_world, "cache/")
    page = parse(body)
    table = page.one("#by-agent-model").text
    assert "researcher" in table and "claude-sonnet-4-5" in table and "refund-analyst" in table
    reg = page.one("[data-regression]")
    assert [b.text for b in reg.select("b.changed-segment")] == ["system"]
    segments = {row[0]: row for row in ([td.text for td in tr.select("td")] for tr in reg.select("tr")) if row}
    assert "changed" in segments["system"] and "same" in segments["tools"]
    assert float(page.one("#miss-total").text) > 0
    assert page.one("#prefixes").select("code")
    data = script_json(body, "cache-data")
    assert data["points"] and {"hit", "prefix_changed"} <= {p["cause"] for p in data["points"]}


def test_it_filters_compactions_by_failed_invariant(demo_world):
    body = body_of(demo_world, "compactions/?failed=user_constraints")
    assert 'data-compaction="' in body and "coder-list-endpoint/step-6" in body
    assert "do not change public API compatibility" in body
    assert "No compactions match" in body_of(demo_world, "compactions/?failed=pending_obligations")
    r = demo_world.client(demo_world.owner).get(f"/p/{demo_world.project.slug}/compactions/?failed=bogus")
    assert r.status_code == 400
    points = script_json(body, "compactions-data")["points"]
    assert points and points[0]["failed"] and points[0]["url"].endswith("/calls/coder-list-endpoint/step-6/")


def test_it_shows_only_real_losses_in_the_missing_box_and_chart_and_risks_apart(demo_world):
    body = body_of(demo_world, "?range=all")
    q1 = parse(body).one("#q-evidence")
    losses = q1.one("ul").select("li")
    assert "Present but not used" not in q1.text and not any("middle zone" in li.text for li in losses)
    links = {li.one("b").text: [urlsplit(a.get("href") or "").path for a in li.select("a[href]")] for li in losses
             if "api_compat in coder-list-endpoint/step-8, lost at step 6" in li.text}
    seen, lost = links["api_compat"]
    assert seen.endswith("/calls/coder-list-endpoint/step-8/") and lost.endswith("/calls/coder-list-endpoint/step-6/")
    assert "risk flag" in q1.one("p.hint .badge.warn").text
    data = script_json(body, "overview-data")
    assert set(data["causes"]) <= {"never_candidate", "left_candidates", "budget", "truncated", "compaction"}
    assert "middle_zone" in data["risks"] and "not_used" not in data["causes"]


def test_it_traces_the_timeline_to_the_compaction_that_lost_the_constraint(demo_world):
    body = body_of(demo_world, "evidence/?key=api_compat&run=coder-list-endpoint")
    rows = {tr.get("data-step"): tr for tr in parse(body).select("tr[data-step]")}
    for step in ("6", "7", "8"):
        assert "Lost in compaction or summary" in rows[step].text and "Never a candidate" not in rows[step].text
    assert not rows["6"].select("a.lost-at")  # lost here
    lost_at = rows["8"].one("a.lost-at")
    assert lost_at.text == "step 6" and "coder-list-endpoint/step-6/" in (lost_at.get("href") or "")


def test_it_gives_the_same_cause_in_the_api(demo_world):
    from manifests import services
    from tests.conftest import Api

    api = Api(services.create_api_key(project=demo_world.project, can_ingest=False, can_read=True)[1])
    body = api.get("/api/v1/calls/coder-list-endpoint/step-8").json()
    missing = [a for a in body["attributions"] if not a["is_risk"]]
    assert [(a["evidence_key"], a["cause"], a["lost_at_call_id"], a["lost_at_step"]) for a in missing] == [
        ("api_compat", "compaction", "coder-list-endpoint/step-6", 6)]


def test_it_labels_both_regression_links_and_shows_one_pair_of_hashes(demo_world):
    from manifests.models import Regression

    regression = Regression.objects.get(project=demo_world.project)
    assert regression.first_call.call_id == "research-019/step-0" and regression.call.call_id == "research-019/step-6"
    body = body_of(demo_world, "cache/?range=all")
    card = parse(body).one("div.card[data-regression]")
    first, crossed = card.one("a.first-call"), card.one("a.crossed-call")
    assert "research-019/step-0/" in (first.get("href") or "")
    assert first.text.startswith("First call with the new prefix")
    assert "research-019/step-6/" in (crossed.get("href") or "")
    assert crossed.text.startswith("the call where it crossed")
    # The sentence and the table name the same hashes of the changed segment.
    sentence = next(e for e in card.elements()
                    if any(isinstance(c, str) and "Segment system:" in c for c in e.children))
    hashes = [c.text for c in sentence.children if isinstance(c, Element) and c.tag == "code"]
    row = next(tr for tr in card.select("tr") if [td.text for td in tr.select("td")][:1] == ["system"])
    assert len(hashes) >= 2 and hashes[:2] == [code.text for code in row.select("code")][:2]
    # The card, the overview box and the chart markers give the same rates.
    rates = f"{regression.baseline_rate * 100:.0f}% → "
    assert rates in card.text
    overview = body_of(demo_world, "?range=all")
    assert rates in parse(overview).one("#q-cache").text
    marker = script_json(body, "cache-data")["regressions"][0]
    assert (marker["baseline"], marker["current"]) == (regression.baseline_rate, regression.current_rate)
    assert script_json(overview, "overview-data")["regressions"][0] == marker


def _pager(body: str) -> tuple[str, dict[str, dict[str, list[str]]]]:
    """The pager's text and its links by label, each link's query parsed."""
    nav = parse(body).one('nav.pager[aria-label="Pages"]')
    links = {a.text: parse_qs(urlsplit(a.get("href") or "").query) for a in nav.select("a[href]")}
    return nav.select("span")[0].text, links


def _three_calls(project, **fields) -> None:
    manifests = [manifest(f"pager-{n}", run_id=f"pager-run-{n}", step=n, **fields) for n in range(3)]
    for n, m in enumerate(manifests):
        m["prefix"]["hash"] = f"{n + 1:064x}"
    report = ingest.ingest_body(project=project, body=json.dumps({"manifests": manifests}).encode())
    assert report.count(ingest.ACCEPTED) == 3
    analysis.analyze_calls(list(Call.objects.filter(project=project).values_list("pk", flat=True)))


@pytest.mark.parametrize(("path", "params", "row"), [
    ("cache/", {"range": "all", "agent": "researcher"}, "table#prefixes tbody tr"),
    ("compactions/", {"range": "all", "failed": "user_constraints", "only_failed": "1"}, "tr[data-compaction]"),
])
def test_it_pages_the_prefix_registry_and_the_compactions_with_the_shared_pager(
    owner, project, monkeypatch, path, params, row
):
    monkeypatch.setattr(cache_sel, "PREFIXES_PER_PAGE", 1)
    monkeypatch.setattr(compaction_sel, "PER_PAGE", 1)
    _three_calls(project)
    client = Client()
    client.force_login(owner)
    url = f"/p/{project.slug}/{path}"
    pages = [client.get(url, {**params, "page": n}).content.decode() for n in (1, 2, 3)]
    expected = {k: [v] for k, v in params.items()}  # the page's filters are kept on every link
    text, links = _pager(pages[1])
    assert text == "page 2 of 3 (2–2 of 3)"
    assert links == {"« first": {**expected, "page": ["1"]}, "← previous": {**expected, "page": ["1"]},
                     "next →": {**expected, "page": ["3"]}, "last »": {**expected, "page": ["3"]}}
    assert parse(pages[1]).select('a.next-page[rel="next"]') and parse(pages[1]).select('a[rel="prev"]')
    text, links = _pager(pages[0])
    assert text == "page 1 of 3 (1–1 of 3)" and set(links) == {"next →", "last »"}
    text, links = _pager(pages[2])
    assert text == "page 3 of 3 (3–3 of 3)" and set(links) == {"« first", "← previous"}
    # Each page shows its own row: newest first, one per page.
    shown = [[tr.text for tr in parse(p).select(row)] for p in pages]
    assert all(len(s) == 1 for s in shown) and len({s[0] for s in shown}) == 3
    # One page of results: no pager.
    monkeypatch.setattr(cache_sel, "PREFIXES_PER_PAGE", 25)
    monkeypatch.setattr(compaction_sel, "PER_PAGE", 50)
    assert 'class="pager"' not in client.get(url, params).content.decode()
