"""The manifest's workspace (cwd and git branch) kept on its run: stored, read back, first one wins."""

from __future__ import annotations

import pytest

from manifests.models import Run
from tests.conftest import Api
from tests.support import manifest

pytestmark = pytest.mark.django_db


def paths(response) -> set[str]:
    return {e["path"] for r in response.json()["results"] for e in r.get("errors", [])}


def test_it_keeps_a_manifests_workspace_on_its_run_and_reads_it_back(api):
    place = {"cwd": "/home/dev/src/ctxview", "git_branch": "feat/run-metadata"}
    r = api.post(manifest("w1", run_id="run-w", workspace=place))
    assert r.json()["accepted"] == 1, r.content
    run = Run.objects.get(run_id="run-w")
    assert (run.cwd, run.git_branch) == ("/home/dev/src/ctxview", "feat/run-metadata")
    listed = api.get("/api/v1/runs").json()["results"]
    assert [(x["run_id"], x["cwd"], x["git_branch"]) for x in listed] == [
        ("run-w", "/home/dev/src/ctxview", "feat/run-metadata")]


def test_a_run_keeps_the_first_non_empty_cwd_and_branch_its_calls_sent(api):
    # One batch: the first call names no branch, the second does; a later batch switches both.
    api.post({"manifests": [
        manifest("f0", run_id="run-f", step=0, workspace={"cwd": "/repo"}),
        manifest("f1", run_id="run-f", step=1, workspace={"cwd": "/elsewhere", "git_branch": "main"}),
    ]})
    run = Run.objects.get(run_id="run-f")
    assert (run.cwd, run.git_branch) == ("/repo", "main")
    api.post(manifest("f2", run_id="run-f", step=2, workspace={"cwd": "/other", "git_branch": "topic"}))
    api.post(manifest("f3", run_id="run-f", step=3))
    run.refresh_from_db()
    assert (run.cwd, run.git_branch) == ("/repo", "main")
    # A run created without one gets the first that arrives later.
    api.post(manifest("g0", run_id="run-g", step=0))
    assert Run.objects.get(run_id="run-g").cwd == ""
    api.post(manifest("g1", run_id="run-g", step=1, workspace={"git_branch": "fix/1"}))
    assert (Run.objects.get(run_id="run-g").cwd, Run.objects.get(run_id="run-g").git_branch) == ("", "fix/1")


def test_a_call_recorded_again_fills_its_runs_empty_branch_and_changes_nothing_else(api):
    # Codex through the proxy: its requests name the folder, not the branch; the same call
    # imported from its rollout later names both.
    proxy = {"name": "ctxkit.proxy", "version": "1"}
    imported = {"name": "ctxkit.import", "version": "1"}
    api.post(manifest("resp_1", run_id="run-c", builder=proxy, workspace={"cwd": "/repo"}))
    r = api.post(manifest("resp_1", run_id="run-c", builder=imported, warnings=["imported"],
                          workspace={"cwd": "/elsewhere", "git_branch": "feat/x"}))
    assert r.json()["results"][0]["status"] == "duplicate"
    run = Run.objects.get(run_id="run-c")
    assert (run.cwd, run.git_branch) == ("/repo", "feat/x")
    api.post(manifest("resp_1", run_id="run-c", builder=proxy, workspace={"git_branch": "other"}))
    run.refresh_from_db()
    assert (run.cwd, run.git_branch) == ("/repo", "feat/x")
    # A copy sent again by anyone else, or the same bytes again, fills nothing.
    api.post(manifest("d0", run_id="run-d"))
    api.post(manifest("d0", run_id="run-d", workspace={"git_branch": "main"}))
    assert Run.objects.get(run_id="run-d").git_branch == ""


def test_it_names_a_bad_workspace_by_its_path(api):
    r = api.post({"manifests": [
        manifest("b0", workspace={"cwd": "/a\nb"}),
        manifest("b1", workspace={"git_branch": "x" * 201}),
        manifest("b2", workspace={"cwd": "/" * 501}),
        manifest("b3", workspace={"folder": "/a"}),
    ]})
    assert r.status_code == 400
    assert paths(r) == {"$.manifests[0].workspace.cwd", "$.manifests[1].workspace.git_branch",
                        "$.manifests[2].workspace.cwd", "$.manifests[3].workspace.folder"}
    assert not Run.objects.exists()


def test_it_stores_hostile_workspace_text_as_data(api):
    hostile = "/tmp/<script>alert(1)</script>/'; DROP TABLE manifests_run; --"
    r = api.post(manifest("h0", run_id="run-h", workspace={"cwd": hostile, "git_branch": "é/<b>"}))
    assert r.json()["accepted"] == 1
    assert (Run.objects.get(run_id="run-h").cwd, Run.objects.get(run_id="run-h").git_branch) == (hostile, "é/<b>")


def test_the_api_filters_runs_by_folder_and_branch_within_the_keys_project(api, other_key):
    api.post({"manifests": [
        manifest("a0", run_id="run-a", workspace={"cwd": "/repo", "git_branch": "main"}),
        manifest("b0", run_id="run-b", workspace={"cwd": "/repo", "git_branch": "topic"}),
        manifest("c0", run_id="run-c", workspace={"cwd": "/other", "git_branch": "main"}),
    ]})
    Api(other_key).post(manifest("s0", run_id="run-secret", workspace={"cwd": "/repo", "git_branch": "main"}))

    def runs(client, **params: str) -> list[str]:
        r = client.get("/api/v1/runs", **params)
        assert r.status_code == 200, r.content
        return sorted(x["run_id"] for x in r.json()["results"])

    assert runs(api, cwd="/repo") == ["run-a", "run-b"]
    assert runs(api, branch="main") == ["run-a", "run-c"]
    assert runs(api, cwd="/repo", branch="main") == ["run-a"]
    assert runs(Api(other_key), cwd="/repo") == ["run-secret"]
    r = api.get("/api/v1/runs", branch="a\nb")
    assert r.status_code == 400 and "?branch" in r.content.decode()
    assert api.get("/api/v1/runs", cwd="x" * 501).status_code == 400
