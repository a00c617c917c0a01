"""The runs list shows where each run's agent worked (folder and git branch) and filters by it;
the run view shows it too. Members only, another project's runs never, hostile text as data."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import Api
from tests.html_page import parse
from tests.support import manifest

pytestmark = pytest.mark.django_db

HOSTILE = "/tmp/<script>alert('cwd')</script>"


@pytest.fixture
def runs(api, other_key):
    def send(client: Api, run_id: str, **workspace: str) -> None:
        r = client.post(manifest(f"{run_id}-0", run_id=run_id, workspace=workspace))
        assert r.json()["accepted"] == 1, r.content

    send(api, "r-main", cwd="/home/dev/src/ctxview", git_branch="main")
    send(api, "r-topic", cwd="/home/dev/src/ctxview", git_branch="feat/x")
    send(api, "r-other", cwd="/home/dev/src/billing", git_branch="main")
    send(api, "r-hostile", cwd=HOSTILE, git_branch="<b>bold</b>")
    send(Api(other_key), "r-secret", cwd="/secret/repo", git_branch="secret-branch")


def login(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def listed(client: Client, slug: str, query: str) -> list[str]:
    r = client.get(f"/p/{slug}/runs/?range=all&{query}")
    assert r.status_code == 200, r.content
    return sorted(row.get("data-run") or "" for row in parse(r.content).select("#runs tbody tr[data-run]"))


def test_it_filters_the_runs_list_by_folder_and_branch(runs, project, member):
    client = login(member)
    slug = project.slug
    assert listed(client, slug, "") == ["r-hostile", "r-main", "r-other", "r-topic"]
    assert listed(client, slug, "cwd=/home/dev/src/ctxview") == ["r-main", "r-topic"]
    assert listed(client, slug, "branch=main") == ["r-main", "r-other"]
    assert listed(client, slug, "cwd=/home/dev/src/ctxview&branch=main") == ["r-main"]
    assert listed(client, slug, "cwd=/nowhere") == []


def test_it_shows_each_runs_folder_shortened_and_branch_linking_to_their_filters(runs, project, owner):
    page = parse(login(owner).get(f"/p/{project.slug}/runs/?range=all&sort=run").content)
    row = page.one('#runs tr[data-run="r-topic"]')
    folder = row.one("[data-cwd]")
    assert folder.text == "…/src/ctxview" and folder.get("title") == "/home/dev/src/ctxview"
    assert "cwd=%2Fhome%2Fdev%2Fsrc%2Fctxview" in (folder.get("href") or "")
    assert "sort=run" in (folder.get("href") or "")  # the link keeps the page's other parameters
    assert row.one("[data-branch]").text == "feat/x"
    # The filter form, server-rendered: every folder and branch of the project, the URL's kept.
    form = parse(login(owner).get(f"/p/{project.slug}/runs/?range=all&sort=run&branch=feat/x").content).one(
        "#runs-place")
    values = [o.get("value") for o in form.select("#place-cwd option")]
    assert values[0] == "" and sorted(values[1:]) == sorted([HOSTILE, "/home/dev/src/billing", "/home/dev/src/ctxview"])
    assert [o.get("value") for o in form.select("#place-branch option[selected]")] == ["feat/x"]
    assert {(i.get("name"), i.get("value")) for i in form.select("input[type=hidden]")} == {
        ("range", "all"), ("sort", "run")}


def test_the_run_view_shows_where_its_agent_worked(runs, api, project, owner):
    page = parse(login(owner).get(f"/p/{project.slug}/runs/r-topic/?range=all").content)
    place = page.one("#run-place")
    assert [c.text for c in place.select("code")] == ["/home/dev/src/ctxview", "feat/x"]
    assert "branch=feat/x" in (place.select("a")[1].get("href") or "")
    api.post(manifest("untold-0", run_id="r-untold"))
    assert not parse(login(owner).get(f"/p/{project.slug}/runs/r-untold/?range=all").content).select("#run-place")


def test_it_never_shows_another_projects_runs_or_places(runs, project, other_project, owner, outsider):
    client = login(owner)
    assert listed(client, project.slug, "cwd=/secret/repo") == []
    assert listed(client, project.slug, "branch=secret-branch") == []
    body = client.get(f"/p/{project.slug}/runs/?range=all").content.decode()
    assert "/secret/repo" not in body and "secret-branch" not in body
    # The outsider sees their own run, and nothing of the other project.
    outside = login(outsider)
    assert listed(outside, other_project.slug, "cwd=/secret/repo") == ["r-secret"]
    assert outside.get(f"/p/{project.slug}/runs/?range=all&cwd=/home/dev/src/ctxview").status_code == 404


def test_it_shows_hostile_workspace_text_as_data(runs, project, owner):
    client = login(owner)
    for url in (f"/p/{project.slug}/runs/?range=all", f"/p/{project.slug}/runs/?range=all&cwd={HOSTILE}",
                f"/p/{project.slug}/runs/r-hostile/?range=all"):
        body = client.get(url).content.decode()
        assert "<script>alert(" not in body and "<b>bold</b>" not in body, url
        assert "&lt;script&gt;alert(" in body and "&lt;b&gt;bold&lt;/b&gt;" in body, url
    page = parse(client.get(f"/p/{project.slug}/runs/r-hostile/?range=all").content)
    assert [c.text for c in page.one("#run-place").select("code")] == [HOSTILE, "<b>bold</b>"]


def test_it_answers_a_bad_folder_or_branch_filter_with_400_naming_it(runs, project, owner):
    client = login(owner)
    for query, param in (("cwd=" + "x" * 501, "cwd"), ("branch=a%0Ab", "branch"), ("branch=" + "y" * 201, "branch")):
        r = client.get(f"/p/{project.slug}/runs/?{query}")
        assert r.status_code == 400, query
        assert f"<code>{param}</code>" in r.content.decode(), query
