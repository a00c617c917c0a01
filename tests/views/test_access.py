"""Who sees what: login required, members only (404 for everyone else), no data of another
project on any page, CSRF on every form."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.test import Client

from tests.demo_world import CANARY
from tests.html_page import parse

pytestmark = pytest.mark.django_db


def pages(slug: str) -> list[str]:
    return [
        f"/p/{slug}/",
        f"/p/{slug}/runs/",
        f"/p/{slug}/runs/refunds-budget-800/",
        f"/p/{slug}/calls/refunds-budget-800/step-6/",
        f"/p/{slug}/evidence/",
        f"/p/{slug}/evidence/?key=rate_limit",
        f"/p/{slug}/evidence/?q=rate",
        f"/p/{slug}/cache/",
        f"/p/{slug}/compactions/",
        f"/p/{slug}/compactions/?failed=user_constraints",
    ]


def whatif(slug: str) -> str:
    return f"/p/{slug}/whatif.json?call={quote('refunds-budget-800/step-6')}&budget=1200&reserve=240"


def test_it_shows_every_page_to_the_owner_and_to_a_member(demo_world):
    for user in (demo_world.owner, demo_world.member):
        client = demo_world.client(user)
        for url in pages(demo_world.project.slug) + [whatif(demo_world.project.slug)]:
            r = client.get(url)
            assert r.status_code == 200, (user, url, r.status_code)


def test_it_answers_404_to_an_outsider_on_every_page(demo_world):
    client = demo_world.client(demo_world.outsider)
    for url in pages(demo_world.project.slug) + [whatif(demo_world.project.slug)]:
        assert client.get(url).status_code == 404, url


def test_it_sends_anonymous_users_to_the_login_page(demo_world):
    client = Client()
    for url in pages(demo_world.project.slug) + ["/"]:
        r = client.get(url)
        assert r.status_code == 302, url
        assert r["Location"].startswith("/accounts/login/?next="), url
    assert client.get(whatif(demo_world.project.slug)).status_code == 401


def test_it_lists_only_the_projects_the_user_belongs_to(demo_world):
    body = demo_world.client(demo_world.member).get("/").content.decode()
    assert demo_world.project.name in body
    assert demo_world.other.name not in body


def test_it_never_shows_another_projects_data(demo_world):
    client = demo_world.client(demo_world.owner)
    for url in pages(demo_world.project.slug) + [whatif(demo_world.project.slug)]:
        assert CANARY not in client.get(url).content.decode(), url
    # The other project's call and run, asked for under this project's slug, do not exist here.
    assert client.get(f"/p/{demo_world.project.slug}/calls/{CANARY}/step-0/").status_code == 404
    assert client.get(f"/p/{demo_world.project.slug}/runs/{CANARY}/").status_code == 404
    r = client.get(f"/p/{demo_world.project.slug}/whatif.json?call={CANARY}/step-0")
    assert r.status_code == 404
    # Filtering by the other project's agent shows nothing of it either.
    body = client.get(f"/p/{demo_world.project.slug}/runs/?agent={CANARY}-agent").content.decode()
    assert "No runs in this range" in body and f"{CANARY}/step-0" not in body


def test_it_puts_a_csrf_token_in_every_post_form(demo_world):
    client = demo_world.client(demo_world.owner)
    seen = 0
    for url in pages(demo_world.project.slug) + ["/"]:
        body = client.get(url).content.decode()
        for form in parse(body).select("form"):
            if (form.get("method") or "").lower() == "post":
                seen += 1
                assert form.select('input[name="csrfmiddlewaretoken"]'), (url, form.attrs)
    assert seen >= len(pages(demo_world.project.slug))  # the logout form on every page at least
    login = parse(Client().get("/accounts/login/").content.decode())
    assert login.select('form input[name="csrfmiddlewaretoken"]')


def test_it_refuses_a_post_without_its_csrf_token(demo_world):
    client = Client(enforce_csrf_checks=True)
    client.force_login(demo_world.owner)
    assert client.post("/accounts/logout/").status_code == 403
    page = client.get(f"/p/{demo_world.project.slug}/").content.decode()
    token = parse(page).select('input[name="csrfmiddlewaretoken"]')[0].get("value")
    assert client.post("/accounts/logout/", {"csrfmiddlewaretoken": token}).status_code == 302


def test_it_only_answers_get_on_the_whatif_endpoint(demo_world):
    client = demo_world.client(demo_world.owner)
    assert client.post(whatif(demo_world.project.slug)).status_code in (403, 405)
