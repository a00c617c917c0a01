"""What-if replay: ctxkit's allocator run again on a stored call, through the JSON endpoint
the call page's script calls."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

import pytest

from manifests import replay
from manifests.models import Call, Evidence, Item
from manifests.storage import partitions

pytestmark = pytest.mark.django_db


def whatif(world, call_id: str, **params):
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return world.client(world.member).get(f"/p/{world.project.slug}/whatif.json?call={quote(call_id)}&{query}")


def test_it_shows_the_evidence_a_larger_budget_would_have_kept(demo_world):
    at_800 = whatif(demo_world, "refunds-budget-800/step-6", budget=800, reserve=160).json()
    at_1200 = whatif(demo_world, "refunds-budget-800/step-6", budget=1200, reserve=240).json()
    ev800 = {e["key"]: e for e in at_800["evidence"]}
    ev1200 = {e["key"]: e for e in at_1200["evidence"]}
    assert ev800["rate_limit"]["actual"] is False and ev800["rate_limit"]["replay"] != "present"
    assert ev1200["rate_limit"]["replay"] == "present"
    history = {r["id"]: r for r in at_1200["items"]}["history"]
    assert history["replay"]["used"] >= history["requested"] > history["actual"]["used"]
    assert at_1200["params"] == {"budget": 1200, "reserve": 240, "safety_margin": 0}
    assert at_1200["cap"] == 960 and at_1200["used"] <= at_1200["cap"]


def test_it_cuts_and_drops_more_at_a_smaller_budget(demo_world):
    own = whatif(demo_world, "research-005/step-7").json()  # defaults: the call's own budget
    small = whatif(demo_world, "research-005/step-7", budget=1600, reserve=100).json()
    assert own["params"]["budget"] == 2000
    assert not any(r["changed"] for r in own["items"])  # measured against the replay at the call's own budget
    assert 0 < own["summary"]["baseline_same_action"] <= own["summary"]["items"]
    assert small["used"] < own["used"]
    own_used = {r["id"]: r["replay"]["used"] for r in own["items"]}
    assert any(r["replay"]["used"] < own_used[r["id"]] for r in small["items"])
    assert small["used"] <= small["cap"] == 1600 - 100 - 100 and not small["over_budget"]
    assert any(r["changed"] for r in small["items"])


def test_it_answers_bad_parameters_with_400_and_the_parameter(demo_world):
    for params, path in (({"budget": "lots"}, "budget"), ({"budget": "0"}, "budget"),
                         ({"reserve": "-5"}, "reserve"), ({"budget": "500", "reserve": "600"}, "reserve"),
                         ({"budget": "10", "reserve": "0", "margin": "20"}, "reserve")):
        r = whatif(demo_world, "refunds-budget-800/step-6", **params)
        assert r.status_code == 400, params
        assert r.json()["errors"][0]["path"] == path, params
    r = demo_world.client(demo_world.member).get(f"/p/{demo_world.project.slug}/whatif.json")
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "call"
    assert whatif(demo_world, "no-such-call").status_code == 404


def test_it_requires_login_and_membership(demo_world):
    from django.test import Client

    url = f"/p/{demo_world.project.slug}/whatif.json?call=refunds-budget-800/step-6"
    assert Client().get(url).status_code == 401
    assert demo_world.client(demo_world.outsider).get(url).status_code == 404


def _call(project) -> Call:
    from manifests.models import Run

    t = datetime(2026, 11, 29, tzinfo=UTC)
    partitions.ensure_range(t, t)  # PostgreSQL: rows written here, not through ingest, need their day
    run = Run.objects.create(project=project, run_id="r", first_seen=t, last_seen=t)
    return Call.objects.create(project=project, run=run, call_id="c", step=0, agent="a", model="m", started_at=t,
                               window=10_000, input_cap=10_000, content_hash="x", raw="{}")


def test_it_keeps_the_requested_sizes_of_items_whose_text_was_not_sent(project):
    call = _call(project)
    sizes = {"system": 300, "huge": 5_000_000, "log": 1234, "page": 777}
    items = [Item(call=call, project=project, started_at=call.started_at,
                  ordinal=n, item_id=name, kind=kind, action=action,
                  pinned=name == "system", priority=p, requested_tokens=sizes[name], position=n)
             for n, (name, kind, action, p) in enumerate([("system", "system", "keep", 100),
                                                          ("huge", "retrieval", "drop", 10),
                                                          ("log", "tool_result", "truncate", 30),
                                                          ("page", "retrieval", "extract", 50)])]
    Item.objects.bulk_create(items)
    big = replay.replay(call, items, [], replay.Params(budget=6_000_000, reserve=0, safety_margin=0))
    by_id = {r["id"]: r for r in big["items"]}
    assert all(by_id[name]["replay"]["used"] == size for name, size in sizes.items())  # exact, with filler
    small = replay.replay(call, items, [], replay.Params(budget=2000, reserve=100, safety_margin=0))
    by_id = {r["id"]: r for r in small["items"]}
    assert by_id["system"]["replay"]["action"] == "keep" and by_id["system"]["replay"]["used"] == 300
    assert small["used"] <= small["cap"] == 1900
    assert by_id["huge"]["replay"]["used"] < 1900


def test_it_judges_evidence_by_literal_when_the_text_was_sent(project):
    call = _call(project)
    items = [Item(call=call, project=project, started_at=call.started_at,
                  ordinal=0, item_id="log", kind="tool_result", action="keep",
                  requested_tokens=40, position=0, text="HTTP 429 Too Many Requests\n" + "ok line\n" * 16)]
    Item.objects.bulk_create(items)
    ev = Evidence(call=call, project=project, started_at=call.started_at,
                  key="rl", label="429", literal="429", expected_item="log", present=True)
    whole = replay.replay(call, items, [ev], replay.Params(budget=1000, reserve=0, safety_margin=0))
    assert whole["evidence"][0]["replay"] == "present" and "read back" in whole["evidence"][0]["why"]
    gone = replay.replay(call, items, [ev], replay.Params(budget=1000, reserve=1000, safety_margin=0))
    assert gone["evidence"][0]["replay"] == "missing"


def test_it_maps_actions_and_kinds_to_allocator_policies():
    def item(**kw):
        return Item(item_id="x", kind=kw.get("kind", "other"), action=kw.get("action", "keep"),
                    pinned=kw.get("pinned", False))

    assert replay.assumed_policy(item(pinned=True, action="summarize")) == "pin"
    assert replay.assumed_policy(item(action="summarize")) == "summarize"
    assert replay.assumed_policy(item(action="hard_cut")) == "truncate"
    assert replay.assumed_policy(item(action="compress", kind="tools")) == "schema"
    assert replay.assumed_policy(item(action="drop", kind="history")) == "summarize"
    assert replay.assumed_policy(item(action="keep", kind="retrieval")) == "extract"
