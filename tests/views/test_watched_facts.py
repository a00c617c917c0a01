"""The settings page's watched facts: owners add and delete them, members read them,
viewers and outsiders change nothing; bad input names the field; hostile text is escaped."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from manifests import facts, services
from manifests.models import Membership, WatchedFact
from tests.analysis.facts_support import compacted_run, send, watch
from tests.conftest import Api
from tests.html_page import parse

pytestmark = pytest.mark.django_db

FORM = {"label": "deploy-target", "text": "deploy only to staging-eu-2", "agent": "researcher"}


def page(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def url(project, tail: str = "") -> str:
    return f"/p/{project.slug}/settings/{tail}"


def fact(project, label: str = "kept", text: str = "keep me", **kw) -> WatchedFact:
    return facts.create_fact(project=project, spec=facts.parse_fact({"label": label, "text": text, **kw}))


def test_it_lets_the_owner_add_and_delete_a_fact(project, owner):
    c = page(owner)
    r = c.post(url(project, "facts"), {**FORM, "is_regex": ""})
    assert r.status_code == 302 and r["Location"].endswith("#watched-facts")
    created = WatchedFact.objects.get(project=project)
    assert (created.label, created.text, created.is_regex, created.agent) == (
        "deploy-target", "deploy only to staging-eu-2", False, "researcher")
    body = c.get(url(project)).content.decode()
    assert f'data-watched-fact="{created.pk}"' in body and 'id="fact-form"' in body
    assert "deploy only to staging-eu-2" in body
    r = c.post(url(project, f"facts/{created.pk}/delete"))
    assert r.status_code == 302 and not WatchedFact.objects.filter(project=project).exists()


def test_it_adds_a_regular_expression_from_the_checkbox(project, owner):
    r = page(owner).post(url(project, "facts"), {"label": "ticket", "text": r"TICKET-\d+", "is_regex": "on"})
    assert r.status_code == 302
    assert WatchedFact.objects.get(project=project).is_regex


def test_it_names_the_bad_field_and_keeps_the_input(project, owner):
    r = page(owner).post(url(project, "facts"), {"label": "", "text": "(unclosed", "is_regex": "on"})
    body = r.content.decode()
    assert r.status_code == 400 and 'id="fact-errors"' in body
    assert "label: must be a name" in body and "text: is not a valid regular expression" in body
    assert "(unclosed</textarea>" in body
    assert not WatchedFact.objects.exists()


def test_it_refuses_a_label_the_project_already_watches(project, owner):
    fact(project, label="deploy-target")
    r = page(owner).post(url(project, "facts"), FORM)
    assert r.status_code == 400 and "already watches a fact labelled" in r.content.decode()
    assert WatchedFact.objects.count() == 1


def test_it_shows_a_member_the_facts_and_refuses_their_changes(project, member):
    existing = fact(project)
    c = page(member)
    body = c.get(url(project)).content.decode()
    assert f'data-watched-fact="{existing.pk}"' in body and 'id="fact-form"' not in body
    assert c.post(url(project, "facts"), FORM).status_code == 403
    assert c.post(url(project, f"facts/{existing.pk}/delete")).status_code == 403
    assert list(WatchedFact.objects.values_list("pk", flat=True)) == [existing.pk]


def test_it_refuses_a_viewer_and_hides_the_facts_from_an_outsider(project, outsider):
    viewer = get_user_model().objects.create_user("vera", password="password-vera")
    services.add_member(project=project, user=viewer, role=Membership.VIEWER)
    existing = fact(project)
    assert page(viewer).post(url(project, "facts"), FORM).status_code == 403
    c = page(outsider)
    assert c.get(url(project)).status_code == 404
    assert c.post(url(project, "facts"), FORM).status_code == 404
    assert c.post(url(project, f"facts/{existing.pk}/delete")).status_code == 404
    assert list(WatchedFact.objects.values_list("pk", flat=True)) == [existing.pk]


def test_it_deletes_no_fact_of_another_project(project, owner, other_project):
    theirs = fact(other_project)
    assert page(owner).post(url(project, f"facts/{theirs.pk}/delete")).status_code == 404
    assert WatchedFact.objects.filter(pk=theirs.pk).exists()


def test_it_escapes_a_hostile_label_text_and_agent(project, owner):
    hostile = '<script>alert("x")</script>'
    fact(project, label=hostile, text=f"{hostile} & <b>", agent="<img src=x onerror=alert(1)>")
    body = page(owner).get(url(project)).content.decode()
    assert "<script>alert" not in body and "<img src=x" not in body
    assert not parse(body).one("#watched-facts").select("b")  # the text's <b> shown as text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in body
    assert "&lt;img src=x onerror=alert(1)&gt;" in body


def test_it_shows_a_lost_fact_on_the_call_evidence_and_compaction_pages(project, owner, key,
                                                                          django_capture_on_commit_callbacks):
    watch(project)
    calls = send(Api(key), django_capture_on_commit_callbacks, compacted_run("run-pages"))
    c = page(owner)
    call_page = c.get(f"/p/{project.slug}/calls/{calls[2].call_id}/").content.decode()
    assert "fact:deploy-target" in call_page and "Lost in compaction" in call_page
    evidence_page = c.get(f"/p/{project.slug}/evidence/?range=all").content.decode()
    assert "fact:deploy-target" in evidence_page
    compactions_page = c.get(f"/p/{project.slug}/compactions/?range=all").content.decode()
    assert "required_evidence" in compactions_page and "<code>deploy-target</code>" in compactions_page

