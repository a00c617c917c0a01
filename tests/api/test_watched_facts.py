"""The watched-fact endpoints: create, list, read, change and delete with a configure key;
bad input answers 400 naming each bad field; another project's facts stay out of reach."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from manifests import facts, services
from manifests.models import WatchedFact

pytestmark = pytest.mark.django_db


def client(raw_key: str | None) -> APIClient:
    c = APIClient()
    if raw_key:
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    return c


@pytest.fixture
def configure_key(project) -> str:
    return services.create_api_key(project=project, name="ops", can_ingest=False, can_configure=True)[1]


def fact(project, label: str = "kept", text: str = "keep me") -> WatchedFact:
    return facts.create_fact(project=project, spec=facts.parse_fact({"label": label, "text": text}))


def test_it_creates_lists_reads_changes_and_deletes_facts_with_a_configure_key(project, configure_key):
    c = client(configure_key)
    r = c.post("/api/v1/watched-facts", {"label": "ticket", "text": r"TICKET-\d+", "is_regex": True}, format="json")
    assert r.status_code == 201, r.content
    created = r.json()
    assert (created["label"], created["key"], created["text"], created["is_regex"], created["agent"]) == (
        "ticket", "fact:ticket", r"TICKET-\d+", True, "")
    assert [x["id"] for x in c.get("/api/v1/watched-facts").json()["results"]] == [created["id"]]
    assert c.get(f"/api/v1/watched-facts/{created['id']}").json() == created
    r = c.put(f"/api/v1/watched-facts/{created['id']}", {"label": "ticket", "text": "TICKET-9", "agent": "triage"},
              format="json")
    assert r.status_code == 200 and (r.json()["text"], r.json()["is_regex"], r.json()["agent"]) == (
        "TICKET-9", False, "triage")
    assert c.delete(f"/api/v1/watched-facts/{created['id']}").status_code == 204
    assert c.get(f"/api/v1/watched-facts/{created['id']}").status_code == 404
    assert not WatchedFact.objects.exists()


@pytest.mark.parametrize(("body", "paths"), [
    ({"label": "bad", "text": "(unclosed", "is_regex": True}, {"$.text"}),
    ({"label": "empty", "text": "x*", "is_regex": True}, {"$.text"}),
    ({"label": "slow", "text": r"^(\w+\s?)+$", "is_regex": True}, {"$.text"}),
    ({"label": "", "text": ""}, {"$.label", "$.text"}),
    ({"label": "x" * 101, "text": "y" * 2001}, {"$.label", "$.text"}),
    ({"label": "long-regex", "text": "a" * 501, "is_regex": True}, {"$.text"}),
    ({"label": "a\x00b", "text": "t", "is_regex": "yes", "colour": "red"}, {"$.label", "$.is_regex", "$.colour"}),
    ({"label": "l", "text": 5, "agent": ["a"]}, {"$.text", "$.agent"}),
    ([1, 2], {"$"}),
])
def test_it_answers_bad_input_with_400_naming_each_field(project, configure_key, body, paths):
    r = client(configure_key).post("/api/v1/watched-facts", body, format="json")
    assert r.status_code == 400, r.content
    assert {e["path"] for e in r.json()["errors"]} == paths and r.json()["error"]
    assert not WatchedFact.objects.exists()


def test_it_says_why_a_regular_expression_is_refused(project, configure_key):
    r = client(configure_key).post("/api/v1/watched-facts", {"label": "bad", "text": "[a-", "is_regex": True},
                                   format="json")
    assert r.status_code == 400
    assert r.json()["errors"] == [{"path": "$.text", "message": r.json()["error"]}]
    assert r.json()["error"].startswith("is not a valid regular expression: ")


def test_it_refuses_a_second_fact_with_the_same_label(project, configure_key):
    existing = fact(project, label="kept")
    c = client(configure_key)
    r = c.post("/api/v1/watched-facts", {"label": "kept", "text": "other"}, format="json")
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "$.label"
    other = fact(project, label="other")
    r = c.put(f"/api/v1/watched-facts/{other.pk}", {"label": "kept", "text": "x"}, format="json")
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "$.label"
    assert WatchedFact.objects.get(pk=existing.pk).text == "keep me"


def test_it_lets_a_read_key_list_facts_but_not_change_them(project, key):
    existing = fact(project)
    c = client(key)  # ingest and read scopes
    assert c.get("/api/v1/watched-facts").status_code == 200
    assert c.post("/api/v1/watched-facts", {"label": "a", "text": "b"}, format="json").status_code == 403
    assert c.delete(f"/api/v1/watched-facts/{existing.pk}").status_code == 403
    ingest_only = services.create_api_key(project=project, can_ingest=True, can_read=False)[1]
    assert client(ingest_only).get("/api/v1/watched-facts").status_code == 403
    assert client(None).get("/api/v1/watched-facts").status_code == 401
    assert WatchedFact.objects.count() == 1


def test_it_never_shows_changes_or_deletes_another_projects_fact(project, other_project, configure_key):
    theirs = fact(other_project)
    c = client(configure_key)
    assert c.get(f"/api/v1/watched-facts/{theirs.pk}").status_code == 404
    assert c.put(f"/api/v1/watched-facts/{theirs.pk}", {"label": "x", "text": "y"}, format="json").status_code == 404
    assert c.delete(f"/api/v1/watched-facts/{theirs.pk}").status_code == 404
    assert c.get("/api/v1/watched-facts").json()["results"] == []
    assert WatchedFact.objects.get(pk=theirs.pk).text == "keep me"


def test_it_answers_a_body_that_is_not_json_with_400(project, configure_key):
    r = client(configure_key).generic("POST", "/api/v1/watched-facts", b"{not json", content_type="application/json")
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "$"


def test_it_documents_the_watched_fact_endpoints_in_the_openapi_document(db):
    spec = Client().get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert set(spec["paths"]["/api/v1/watched-facts"]) >= {"get", "post"}
    assert set(spec["paths"]["/api/v1/watched-facts/{fact_id}"]) >= {"get", "put", "delete"}
    assert "WatchedFactRequest" in spec["components"]["schemas"]
