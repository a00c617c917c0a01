"""One meaning per figure: for generated sets of manifests, every figure the API, the
overview, the run view, the call view, the evidence timeline and the rollups show equals
its reference definition computed straight from the manifests (tests/analysis/figures_reference.py,
which uses ctxkit.figures only). This is the test that keeps the pages honest."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxkit.manifest import Compaction, Evidence, Invariant, Item, Outcome, Usage
from ctxkit.models import format_usd
from manifests import services
from manifests.models import Run
from manifests.selectors import evidence as evidence_sel
from tests.analysis import figures_reference as reference
from tests.analysis.support import flush_rollups
from tests.conftest import Api
from tests.html_page import parse
from tests.support import T0, manifest, store_and_analyse

pytestmark = pytest.mark.django_db

ITEM_IDS = ("system", "history", "doc", "log")
KEYS = ("k1", "k2")
ACTIONS = ("keep", "keep", "truncate", "summarize", "drop", "clear", "dedupe", "hard_cut", "ref")
LITERAL = {"k1": "divide by 100", "k2": "HTTP 429"}


@st.composite
def calls(draw):
    items = []
    for n, item_id in enumerate(ITEM_IDS):
        if not draw(st.booleans()) and item_id != "system":
            continue
        action = draw(st.sampled_from(ACTIONS))
        requested = draw(st.integers(0, 3000))
        # granted / used may be absent (the README's curl example: a keep item with neither).
        granted = draw(st.none() | st.integers(0, requested))
        used = draw(st.none() | st.integers(0, granted if granted is not None else requested))
        items.append(Item(
            id=item_id, kind={"history": "history", "log": "tools"}.get(item_id, "retrieval"), action=action,
            requested_tokens=requested, granted_tokens=granted, used_tokens=used,
            position=n if draw(st.booleans()) else None,
            zone=draw(st.none() | st.sampled_from(("head", "middle", "tail"))),
        ))
    evidence = []
    for key in KEYS:
        if not draw(st.booleans()):
            continue
        present = draw(st.booleans())
        where = draw(st.sampled_from(ITEM_IDS))
        evidence.append(Evidence(key=key, literal=LITERAL[key], expected_item=where, present=present,
                                 found_in=where if present else None,
                                 used=draw(st.sampled_from((None, True, False))) if present else None))
    compactions = []
    if draw(st.integers(0, 3)) == 0:
        compactions.append(Compaction(
            id="cmp", strategy="summary", tokens_before=4000, tokens_after=800, summary_item="history",
            invariants=[Invariant(name="user_constraints", ok=False, lost=[LITERAL["k1"]]),
                        Invariant(name="required_evidence", ok=draw(st.booleans()))]))
    input_tokens = draw(st.sampled_from((0, draw(st.integers(1, 20_000)))))
    read = draw(st.integers(0, input_tokens))
    write = draw(st.integers(0, input_tokens - read))
    usage = Usage(input_tokens=input_tokens, cache_read_tokens=read, cache_write_tokens=write,
                  output_tokens=draw(st.integers(0, 2000)))
    outcome = Outcome(verified=draw(st.sampled_from(("yes", "no", "unknown"))))
    return {"items": items, "evidence": evidence, "compactions": compactions, "usage": usage, "outcome": outcome}


def _demo_like_run():
    """The demo's lossy summary as one run: k1 present, lost in a compaction at step 2, still
    missing at step 3 (traced back to step 2); a keep item with no position or counts."""
    history = Item(id="history", kind="history", action="keep", requested_tokens=120)
    usage = Usage(input_tokens=1200, cache_read_tokens=600)
    lost = Compaction(id="cmp", strategy="summary", tokens_before=4000, tokens_after=800, summary_item="history",
                      invariants=[Invariant(name="user_constraints", ok=False, lost=[LITERAL["k1"]])])

    def step(present, compactions=()):
        return {"items": [history], "usage": usage, "outcome": Outcome(), "compactions": list(compactions),
                "evidence": [Evidence(key="k1", literal=LITERAL["k1"], expected_item="history", present=present,
                                      found_in="history" if present else None)]}
    return [[step(True), step(True), step(False, [lost]), step(False)]]


def _hard_cut_run():
    """k2 present, cut away by a hard_cut of its item at step 2 (with the builder's reason),
    undeclared at step 3, missing at step 4 (traced back to step 2's decision); usage sent at
    some steps only."""
    def step(present, action="keep", input_tokens=5230):
        log = Item(id="log", kind="tools", action=action, requested_tokens=900,
                   used_tokens=120 if action == "hard_cut" else 900,
                   reason="budget exhausted: cut at 120 of 900" if action == "hard_cut" else "")
        evidence = [] if present is None else [Evidence(key="k2", literal=LITERAL["k2"], expected_item="log",
                                                        present=present, found_in="log" if present else None)]
        return {"items": [Item(id="system", kind="retrieval", action="keep", requested_tokens=698), log],
                "usage": Usage(input_tokens=input_tokens), "outcome": Outcome(), "compactions": [],
                "evidence": evidence}
    return [[step(True), step(True), step(False, "hard_cut"), step(None, input_tokens=0), step(False)]]


WORKLOADS = st.lists(st.lists(calls(), min_size=1, max_size=4), min_size=1, max_size=2)
_projects = itertools.count()


def _pct_equal(shown, expected):
    return shown is None if expected is None else shown == pytest.approx(expected, rel=1e-9, abs=1e-12)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(workload=WORKLOADS)
@example(workload=_demo_like_run())
@example(workload=_hard_cut_run())
def test_every_page_shows_the_reference_figures(owner, workload):
    project = services.create_project(name=f"Consistency {next(_projects)}", owner=owner)
    manifests = []
    for r, run in enumerate(workload):
        for step, spec in enumerate(run):
            manifests.append(manifest(f"r{r}-s{step}", bare=True, run_id=f"run-{r}", step=step, agent=f"agent-{r % 2}",
                                      started_at=T0 + timedelta(minutes=7 * (step + 5 * r)), **spec))
    store_and_analyse(project, manifests)
    flush_rollups()  # the overview's figures come from the rollups
    refs = reference.calls(project)
    api = Api(services.create_api_key(project=project, can_ingest=False, can_read=True)[1])
    client = Client()
    client.force_login(owner)

    for call_id, ref in refs.items():
        # The API
        body = api.get(f"/api/v1/calls/{call_id}").json()
        assert _pct_equal(body["cache_hit_ratio"], ref.hit_rate)
        assert body["uncached_input_tokens"] == ref.uncached
        assert body["context_tokens"] == ref.context_tokens
        assert sum(i["context_tokens"] for i in body["items"]) == ref.context_tokens
        missing = sorted((a["evidence_key"], a["cause"], a["lost_at_step"], a["action"], a["reason"])
                         for a in body["attributions"] if not a["is_risk"])
        risks = sorted((a["evidence_key"], a["cause"]) for a in body["attributions"] if a["is_risk"])
        assert (missing, risks) == (ref.decisions, ref.risks), call_id
        assert (body["input_cap"], body["input_read"], body["headroom"]) == (ref.input_cap, ref.input_read,
                                                                              ref.headroom), call_id
        assert body["cost"] == pytest.approx(ref.cost, rel=1e-9, abs=1e-12)
        assert body["cost_usd"] == pytest.approx(ref.cost_usd, rel=1e-9, abs=1e-15)

        # The call view
        page = client.get(reverse("call-detail", args=[project.slug, call_id]), {"range": "all"})
        assert page.status_code == 200
        ctx = page.context
        assert ctx["allocation"]["used"] == ref.context_tokens
        assert sum(r["used"] for r in ctx["allocation"]["items"] if r["in_context"]) == ref.context_tokens
        assert _pct_equal(ctx["call"].cache_hit_ratio, ref.hit_rate)
        assert _pct_equal(ctx["figures"].cache_hit_ratio, ref.hit_rate)
        assert ctx["figures"].context_tokens == ref.context_tokens
        assert ctx["figures"].cost == pytest.approx(ref.cost, rel=1e-9, abs=1e-12)
        assert ctx["figures"].cost_usd == pytest.approx(ref.cost_usd, rel=1e-9, abs=1e-15)
        shown_usd = parse(page.content).one("b#cost-usd").raw_text
        assert shown_usd == (format_usd(ref.cost_usd) if ref.cost_usd is not None else "–"), call_id
        # Headroom and the shares of the window: the page's summary and bar, and the stored figures.
        assert (ctx["allocation"]["input_read"], ctx["allocation"]["headroom"]) == (ref.input_read, ref.headroom)
        assert ctx["allocation"]["used"] + ctx["allocation"]["unitemized"] + ctx["allocation"]["headroom"] == \
            ref.input_cap
        assert f'headroom <b id="headroom">{ref.headroom}</b>' in page.content.decode()
        assert ctx["figures"].headroom_tokens == ref.headroom
        assert ctx["figures"].window_utilization == ref.window_utilization
        assert ctx["figures"].reserve_share == ref.reserve_share
        assert ctx["figures"].tool_share == ref.tool_share
        shown = sorted((row["e"].key, row["attribution"].cause,
                        row["attribution"].lost_at.step if row["attribution"].lost_at else None,
                        row["attribution"].action, row["attribution"].reason)
                       for row in ctx["evidence"] if row["attribution"] is not None)
        assert shown == ref.decisions, call_id
        assert sorted((a.evidence_key, a.cause) for a in ctx["risks"]) == ref.risks
        shown_reviews = [(c["figures"].ratio_r, c["figures"].checked) for c in ctx["compactions"]]
        assert shown_reviews == [(c.tokens_after / c.tokens_before if c.tokens_before else None, len(c.invariants))
                                 for c in ref.manifest.compactions]

    # The run view and the evidence timeline
    for run in Run.objects.filter(project=project):
        page = client.get(reverse("run-detail", args=[project.slug, run.run_id]), {"range": "all"})
        for step in page.context["steps"]:
            ref = refs[step["call"].call_id]
            assert step["context_tokens"] == ref.context_tokens
            assert step["cost_usd"] == pytest.approx(ref.cost_usd, rel=1e-9, abs=1e-15)
            assert _pct_equal(step["hit_rate"], ref.hit_rate)
        for key in KEYS:
            for row in evidence_sel.timeline(project, run, key):
                ref = refs[row["call"].call_id]
                if not row["declared"]:
                    continue
                a = row["attribution"]
                shown = [] if a is None else [(key, a.cause, a.lost_at.step if a.lost_at else None, a.action,
                                               a.reason)]
                assert shown == [m for m in ref.decisions if m[0] == key]
                assert sorted((key, k.cause) for k in row["risks"]) == [r for r in ref.risks if r[0] == key]

    # The overview: headline cards and the missing / risk charts
    page = client.get(reverse("overview", args=[project.slug]), {"range": "all"})
    cards = {c["key"]: c["value"] for c in page.context["cards"]}
    all_refs = list(refs.values())
    input_total = sum(r.manifest.usage.input_tokens for r in all_refs)
    read_total = sum(r.manifest.usage.cache_read_tokens for r in all_refs)
    evidence = [e for r in all_refs for e in r.manifest.evidence]
    assert cards["calls"] == len(all_refs)
    assert _pct_equal(cards["hit_rate"], read_total / input_total if input_total else None)
    assert _pct_equal(cards["evidence_coverage"],
                      sum(e.present for e in evidence) / len(evidence) if evidence else None)
    assert cards["cost"] == pytest.approx(sum(r.cost for r in all_refs), rel=1e-6, abs=1e-6)
    assert cards["cost_usd"] == pytest.approx(sum(r.cost_usd or 0.0 for r in all_refs), rel=1e-6, abs=1e-9)
    for a in page.context["missing"]:  # the latest missing evidence, with the decision the timeline shows
        assert (a.evidence_key, a.cause, a.lost_at.step if a.lost_at else None, a.action, a.reason) in \
            refs[a.call.call_id].decisions
    charts = page.context["charts"]
    assert {c: sum(v) for c, v in charts["causes"].items()} == _count(m[1] for r in all_refs for m in r.missing)
    assert {c: sum(v) for c, v in charts["risks"].items()} == _count(k[1] for r in all_refs for k in r.risks)
    assert page.context["risk_count"] == sum(len(r.risks) for r in all_refs)

    # The rollups
    for bucket in ("hour", "day"):
        reference.assert_rollups_match(project, bucket)


def _count(values):
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out
