"""The app's own 404 and 500 pages, also with DEBUG on for unknown runs and calls."""

from __future__ import annotations

import pytest
from django.test import RequestFactory, override_settings
from django.views.defaults import server_error

pytestmark = pytest.mark.django_db


@override_settings(DEBUG=True)
def test_it_shows_the_app_404_for_an_unknown_call_with_debug_on_to_the_owner(demo_world):
    r = demo_world.client(demo_world.owner).get(f"/p/{demo_world.project.slug}/calls/no-such/call/")
    assert r.status_code == 404
    body = r.content.decode()
    assert 'id="not-found"' in body and "Technical details" not in body
    assert f'href="/p/{demo_world.project.slug}/"' in body  # back to the project, with its top bar


@override_settings(DEBUG=True)
def test_it_shows_the_app_404_for_an_unknown_run_to_a_member(demo_world):
    r = demo_world.client(demo_world.member).get(f"/p/{demo_world.project.slug}/runs/<b>no-such-run</b>/")
    assert r.status_code == 404
    body = r.content.decode()
    assert 'id="not-found"' in body and "No run" in body
    assert "<b>no-such-run</b>" not in body  # the id is escaped


@override_settings(DEBUG=True)
def test_it_shows_the_app_404_for_a_project_the_outsider_is_not_in(demo_world):
    r = demo_world.client(demo_world.outsider).get(f"/p/{demo_world.project.slug}/runs/")
    assert r.status_code == 404 and b'id="not-found"' in r.content
    assert demo_world.project.name.encode() not in r.content


def test_it_shows_the_app_404_for_an_unknown_address(demo_world):
    r = demo_world.client(demo_world.member).get("/no/such/page/")
    assert r.status_code == 404 and b'id="not-found"' in r.content


def test_it_shows_the_app_500_page():
    r = server_error(RequestFactory().get("/"))
    assert r.status_code == 500
    assert b'id="server-error"' in r.content and b"app.css" in r.content
