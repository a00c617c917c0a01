"""The read API: runs, calls of a run, one call with its children; filters and pagination."""

from __future__ import annotations

import pytest

from tests.support import manifest

pytestmark = pytest.mark.django_db


@pytest.fixture
def stored(api):
    body = {
        "manifests": [manifest(f"a{n}", run_id="run-a", step=n) for n in range(3)]
        + [manifest("b0", run_id="run-b", agent="planner", model="gpt-5")]
    }
    assert api.post(body).json()["accepted"] == 4


def test_it_lists_runs_newest_first_with_call_counts(api, stored):
    data = api.get("/api/v1/runs").json()
    assert data["count"] == 2
    by_id = {r["run_id"]: r for r in data["results"]}
    assert by_id["run-a"]["call_count"] == 3
    assert by_id["run-b"]["agent"] == "planner"


def test_it_filters_runs_by_agent_and_model(api, stored):
    assert [r["run_id"] for r in api.get("/api/v1/runs", agent="planner").json()["results"]] == ["run-b"]
    assert [r["run_id"] for r in api.get("/api/v1/runs", model="gpt-5").json()["results"]] == ["run-b"]


def test_it_paginates(api, stored):
    data = api.get("/api/v1/runs", limit=1).json()
    assert len(data["results"]) == 1 and data["next"]


def test_it_answers_a_bad_time_filter_with_400(api, stored):
    r = api.get("/api/v1/runs", since="yesterday")
    assert r.status_code == 400
    assert r.json()["errors"][0]["path"] == "?since"


def test_it_lists_the_calls_of_a_run_by_step(api, stored):
    data = api.get("/api/v1/runs/run-a/calls").json()
    assert [c["step"] for c in data["results"]] == [0, 1, 2]
    assert data["results"][0]["cache_hit_ratio"] == pytest.approx(0.35)


def test_it_returns_one_call_with_its_items(api, stored):
    call = api.get("/api/v1/calls/a1").json()
    assert [i["id"] for i in call["items"]] == ["item-0", "item-1", "item-2"]
    assert call["evidence"][0]["key"] == "rate-limit"
    assert call["compactions"][0]["invariants"][0]["name"] == "user_constraints"
    assert call["context_edits"][0]["type"] == "clear_tool_uses"
    assert call["prefix_segments"][0]["name"] == "system"


def test_it_answers_404_for_an_unknown_call(api, stored):
    assert api.get("/api/v1/calls/nope").status_code == 404


def test_it_reads_ids_that_hold_slashes(api):
    assert api.post(manifest("run-7/step-3", run_id="team/run-7")).json()["accepted"] == 1
    assert api.get("/api/v1/calls/run-7/step-3").json()["call_id"] == "run-7/step-3"
    calls = api.get("/api/v1/runs/team/run-7/calls").json()["results"]
    assert [c["call_id"] for c in calls] == ["run-7/step-3"]
