"""The live tail: its page (first paint on the server) and the feed its script polls."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from manifests.models import Call, CallFigures
from manifests.selectors import live
from tests.html_page import parse
from tests.support import manifest

pytestmark = pytest.mark.django_db


def fresh(call_id: str, *, seconds_ago: float = 0, items: int = 2, **extra) -> dict:
    """A manifest made now (the live tail reads the last day of call times)."""
    started = timezone.now() - timedelta(seconds=seconds_ago)
    return manifest(call_id, items=items, started_at=started.isoformat(), **extra)


def send(api, *manifests: dict) -> None:
    r = api.post({"manifests": list(manifests)})
    assert r.status_code in (200, 201, 207), r.content
    assert r.json()["accepted"] == len(manifests), r.json()


def as_user(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def feed(client: Client, project, query: str = ""):
    return client.get(f"/p/{project.slug}/live.json?{query}")


def ids(answer) -> list[str]:
    return [c["call_id"] for c in answer.json()["calls"]]


def rows(body: str) -> list[str]:
    return [tr.get("data-call") for tr in parse(body).select("tr[data-id][data-call]")]


def test_it_shows_the_live_page_to_the_owner_and_a_member(project, owner, member, api):
    send(api, fresh("c-1", seconds_ago=2, step=0), fresh("c-2", step=1))
    for user in (owner, member):
        r = as_user(user).get(f"/p/{project.slug}/live/")
        assert r.status_code == 200
        body = r.content.decode()
        assert rows(body) == ["c-2", "c-1"]  # newest first
        assert '<script src="/static/ctxview/live.js' in body
        assert "<script>" not in body  # no inline script: the CSP allows none
        assert f'data-feed="/p/{project.slug}/live.json"' in body
        assert 'aria-current="page" data-nav="live"' in body


def test_it_answers_an_outsider_with_404_and_a_visitor_with_a_login(project, outsider, api):
    send(api, fresh("secret-call"))
    page = as_user(outsider).get(f"/p/{project.slug}/live/")
    assert page.status_code == 404
    assert b"secret-call" not in page.content
    answer = feed(as_user(outsider), project)
    assert answer.status_code == 404
    assert b"secret-call" not in answer.content
    assert Client().get(f"/p/{project.slug}/live/").status_code == 302
    anonymous = feed(Client(), project)
    assert anonymous.status_code == 401
    assert anonymous.json() == {"error": "login required"}


def test_it_returns_only_the_calls_after_the_cursor(project, member, api):
    send(api, fresh("early-1", step=0), fresh("early-2", step=1))
    first = feed(as_user(member), project).json()
    assert [c["call_id"] for c in first["calls"]] == ["early-2", "early-1"]
    cursor = first["cursor"]
    assert cursor == str(Call.objects.get(call_id="early-2").pk)

    assert feed(as_user(member), project, f"after={cursor}").json() == {"cursor": cursor, "truncated": False,
                                                                        "calls": []}
    send(api, fresh("late-1", step=2), fresh("late-2", step=3))
    later = feed(as_user(member), project, f"after={cursor}")
    assert ids(later) == ["late-2", "late-1"]
    assert later.json()["cursor"] == str(Call.objects.get(call_id="late-2").pk)
    # From the middle: only what came after that call.
    middle = Call.objects.get(call_id="early-2").pk
    assert ids(feed(as_user(member), project, f"after={middle}")) == ["late-2", "late-1"]


def test_it_gives_each_row_its_links_and_its_stored_figures(project, member, api):
    send(api, fresh("linked/step-0", run_id="run/a"))
    row = feed(as_user(member), project).json()["calls"][0]
    assert row["url"] == f"/p/{project.slug}/calls/linked/step-0/"
    assert row["run_url"] == f"/p/{project.slug}/runs/run/a/"
    assert (row["agent"], row["model"], row["status"], row["step"]) == ("researcher", "claude-sonnet-4-5", "ok", 0)
    assert (row["input_tokens"], row["output_tokens"], row["evidence"]) == (2000, 150, "1 / 1")
    call = Call.objects.get(call_id="linked/step-0")
    figures = CallFigures.objects.filter(call=call).first()
    if figures is not None:  # analysed in-process (Celery eager): the figures are shown
        assert row["analysed"] is True
        assert row["hit"] == f"{figures.cache_hit_ratio * 100:.0f}%"
        assert row["cost"] == f"{figures.cost:.3f}"


def test_it_shows_a_call_that_is_not_analysed_yet(project, member, api):
    send(api, fresh("waiting"))
    call = Call.objects.get(call_id="waiting")
    CallFigures.objects.filter(call=call).delete()
    Call.objects.filter(pk=call.pk).update(analyzed_at=None)
    row = feed(as_user(member), project).json()["calls"][0]
    assert (row["call_id"], row["analysed"], row["hit"], row["cost"]) == ("waiting", False, "", "")
    body = as_user(member).get(f"/p/{project.slug}/live/").content.decode()
    assert rows(body) == ["waiting"]
    assert 'data-analysed="0"' in body


def test_it_applies_the_agent_model_run_and_status_filters(project, member, api):
    send(api,
         fresh("a", run_id="r1", agent="planner", model="m-1"),
         fresh("b", run_id="r1", agent="coder", model="m-1", outcome={"status": "error"}),
         fresh("c", run_id="r2", agent="coder", model="m-2"))
    c = as_user(member)
    assert ids(feed(c, project, "agent=coder")) == ["c", "b"]
    assert ids(feed(c, project, "model=m-1")) == ["b", "a"]
    assert ids(feed(c, project, "run=r1")) == ["b", "a"]
    assert ids(feed(c, project, "status=error")) == ["b"]
    assert ids(feed(c, project, "agent=coder&run=r2")) == ["c"]
    after_a = Call.objects.get(call_id="a").pk
    assert ids(feed(c, project, f"agent=coder&after={after_a}")) == ["c", "b"]
    body = c.get(f"/p/{project.slug}/live/?status=error&agent=coder").content.decode()
    assert rows(body) == ["b"]
    assert f'data-feed="/p/{project.slug}/live.json?agent=coder&amp;status=error"' in body


def test_it_keeps_other_projects_calls_out(project, other_project, member, api, other_key):
    from tests.conftest import Api

    send(Api(other_key), fresh("elsewhere"))
    send(api, fresh("here"))
    assert ids(feed(as_user(member), project)) == ["here"]


def test_it_bounds_each_answer_to_the_window(project, member, api):
    total = live.WINDOW + 5
    send(api, *[fresh(f"burst-{n:03d}", step=n, items=0) for n in range(total)])
    answer = feed(as_user(member), project).json()
    assert len(answer["calls"]) == live.WINDOW
    assert answer["truncated"] is True
    assert answer["calls"][0]["call_id"] == f"burst-{total - 1:03d}"
    assert answer["calls"][-1]["call_id"] == f"burst-{total - live.WINDOW:03d}"
    body = as_user(member).get(f"/p/{project.slug}/live/").content.decode()
    assert len(rows(body)) == live.WINDOW
    assert f'data-window="{live.WINDOW}"' in body
    # From a cursor five calls back, exactly those five.
    cursor = Call.objects.get(call_id=f"burst-{total - 6:03d}").pk
    tail = feed(as_user(member), project, f"after={cursor}").json()
    assert [c["call_id"] for c in tail["calls"]] == [f"burst-{n:03d}" for n in range(total - 1, total - 6, -1)]
    assert tail["truncated"] is False


def test_it_leaves_out_calls_made_before_the_lookback(project, member, api):
    old = manifest("back-filled", items=0,
                        started_at=(timezone.now() - live.LOOKBACK - timedelta(hours=1)).isoformat())
    send(api, old, fresh("recent"))
    assert ids(feed(as_user(member), project, "range=all")) == ["recent"]
    assert ids(feed(as_user(member), project, "range=7d")) == ["recent"]


def test_it_answers_304_when_nothing_changed(project, member, api):
    send(api, fresh("one"))
    c = as_user(member)
    first = feed(c, project)
    assert first.status_code == 200
    etag = first["ETag"]
    assert "private" in first["Cache-Control"] and "no-cache" in first["Cache-Control"]
    again = c.get(f"/p/{project.slug}/live.json", HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304
    assert again.content == b""
    send(api, fresh("two"))
    changed = c.get(f"/p/{project.slug}/live.json", HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200
    assert ids(changed) == ["two", "one"]


@pytest.mark.parametrize("query, param", [
    ("after=-1", "after"), ("after=abc", "after"), ("after=99999999999999999999", "after"),
    ("after=%D9%A3", "after"), ("range=5y", "range"), ("cache=nonsense", "cache"), ("run=" + "r" * 201, "run"),
])
def test_it_answers_a_bad_parameter_with_400_naming_it(project, member, query, param):
    answer = feed(as_user(member), project, query)
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["path"] == param
    page = as_user(member).get(f"/p/{project.slug}/live/?{query}")
    if param != "after":  # the page takes no cursor
        assert page.status_code == 400


def test_it_shows_hostile_ids_as_text(project, member, api):
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    send(api, fresh("evil/" + evil[:40], run_id="run " + evil[:60], agent="agent " + evil[:60],
                    model="model " + evil[:60], outcome={"status": evil[:60]}))
    body = as_user(member).get(f"/p/{project.slug}/live/").content.decode()
    assert "<script>alert" not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    row = feed(as_user(member), project).json()["calls"][0]
    assert row["agent"] == "agent " + evil[:60]
    assert row["status"] == evil[:60]


def test_it_links_the_live_page_from_the_navigation(project, member):
    body = as_user(member).get(f"/p/{project.slug}/runs/").content.decode()
    assert f'<a href="/p/{project.slug}/live/" class="" data-nav="live">Live</a>' in body


def test_it_narrows_the_calls_list_by_status_too(project, member, api):
    send(api, fresh("fine"), fresh("broken", step=1, outcome={"status": "error"}))
    body = as_user(member).get(f"/p/{project.slug}/calls/?status=error").content.decode()
    assert [tr.get("data-call") for tr in parse(body).select("tr[data-call]")] == ["broken"]
    assert "status: <b>error</b>" in body
