"""Headroom and a traced decision read the same on every surface: the call page (summary,
allocation bar, Decision cell), the API (/api/v1/calls/<id>), the stored figures, the evidence
timeline and the overview. The run: evidence present at steps 0 and 1, cut away by a ``hard_cut``
of its item at step 2, undeclared at step 3, missing again at step 4."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from manifests import services
from manifests.models import Attribution, CallFigures
from tests.analysis.support import CUT, flush_rollups, hard_cut_run
from tests.conftest import Api
from tests.html_page import parse
from tests.support import store_and_analyse

pytestmark = pytest.mark.django_db


def test_headroom_and_the_traced_decision_agree_on_page_api_and_stored_figures(owner):
    project = services.create_project(name="Traced", owner=owner)
    calls = store_and_analyse(project, hard_cut_run())
    flush_rollups()
    api = Api(services.create_api_key(project=project, can_ingest=False, can_read=True)[1])
    client = Client()
    client.force_login(owner)

    # Headroom: input cap − input read, everywhere. Step 4: 31,400 − 5,230 (not − 4,898 in context).
    for call, cap, read, headroom in ((calls[4], 31_400, 5_230, 26_170), (calls[3], 8_000, 4_898, 3_102)):
        body = api.get(f"/api/v1/calls/{call.call_id}").json()
        assert (body["input_cap"], body["input_read"], body["headroom"]) == (cap, read, headroom)
        page = client.get(reverse("call-detail", args=[project.slug, call.call_id]), {"range": "all"})
        alloc = page.context["allocation"]
        assert (alloc["input_cap"], alloc["input_read"], alloc["headroom"]) == (cap, read, headroom)
        assert alloc["used"] + alloc["unitemized"] + alloc["headroom"] == cap  # the bar ends at the cap
        assert f'headroom <b id="headroom">{headroom}</b>' in page.content.decode()
        assert CallFigures.objects.get(call=call).headroom_tokens == headroom

    # The decision at step 2, where the evidence was lost: the item's action and its reason.
    at_loss = Attribution.objects.get(call=calls[2], is_risk=False)
    assert (at_loss.cause, at_loss.item_id, at_loss.action, at_loss.reason, at_loss.lost_at_id) == (
        Attribution.BUDGET, "example-6", "hard_cut", CUT, None)

    # Step 4 keeps that decision, traced back to step 2: stored, API, call page.
    traced = Attribution.objects.get(call=calls[4], is_risk=False)
    assert (traced.cause, traced.item_id, traced.action, traced.reason, traced.lost_at_id) == (
        Attribution.BUDGET, "example-6", "hard_cut", f"lost at step 2: {CUT}", calls[2].pk)
    body = api.get(f"/api/v1/calls/{calls[4].call_id}").json()
    (shown,) = [a for a in body["attributions"] if not a["is_risk"]]
    assert shown == {"evidence_key": "refund-limit", "cause": "budget", "is_risk": False, "item_id": "example-6",
                     "action": "hard_cut", "reason": f"lost at step 2: {CUT}", "fix": traced.fix,
                     "lost_at_call_id": calls[2].call_id, "lost_at_step": 2}
    page = client.get(reverse("call-detail", args=[project.slug, calls[4].call_id]), {"range": "all"})
    row = parse(page.content).one('tr[data-evidence="refund-limit"]')
    cause, decision = row.select("td")[5:7]  # Key, Label, Expected in, Reached?, Used?, Cause, Decision
    assert decision.lines == ["example-6 hard_cut", f"lost at step 2: {CUT}"]
    assert decision.one("b").text == "example-6" and decision.one("span.action.action-hard_cut").text == "hard_cut"
    assert cause.one("a.lost-at").text == "step 2"  # the Cause cell links to the step where it was lost

    # The evidence timeline and the overview show the same decision.
    page = client.get(reverse("evidence", args=[project.slug]), {"key": "refund-limit", "run": "run-7",
                                                                "range": "all"})
    timeline = {r["call"].step: r for r in page.context["timeline"] if r["declared"]}
    assert [(s, r["attribution"].action, r["attribution"].reason) for s, r in timeline.items() if r["attribution"]] \
        == [(2, "hard_cut", CUT), (4, "hard_cut", f"lost at step 2: {CUT}")]
    page = client.get(reverse("overview", args=[project.slug]), {"range": "all"})
    latest = page.context["missing"][0]
    assert (latest.call.call_id, latest.lost_at.step, latest.action, latest.reason) == (
        calls[4].call_id, 2, "hard_cut", f"lost at step 2: {CUT}")
    assert 'example-6 <span class="action action-hard_cut">hard_cut</span>' in page.content.decode()
