"""API keys: 401 with WWW-Authenticate, scopes, revocation and project isolation."""

from __future__ import annotations

import pytest

from manifests import services
from manifests.models import ApiKey, Call, hash_key
from tests.conftest import Api
from tests.support import manifest

pytestmark = pytest.mark.django_db

ENDPOINTS = ["/api/v1/runs", "/api/v1/runs/run-1/calls", "/api/v1/calls/call-1"]


def test_it_answers_401_with_www_authenticate_when_the_key_is_missing(project):
    r = Api(None).post(manifest())
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    for path in ENDPOINTS:
        assert Api(None).get(path).status_code == 401


def test_it_answers_401_for_a_wrong_key(project):
    r = Api("ctx_wrong").post(manifest())
    assert r.status_code == 401
    assert "not valid" in r.json()["error"]


def test_it_answers_401_for_a_malformed_authorization_header(api):
    r = api.client.generic(
        "POST", "/api/v1/manifests", b"{}", content_type="application/json", HTTP_AUTHORIZATION="Basic abc"
    )
    assert r.status_code == 401


def test_it_stores_only_the_hash_of_a_key(project):
    key, raw = services.create_api_key(project=project)
    assert key.hashed == hash_key(raw)
    assert raw not in {k.hashed for k in ApiKey.objects.all()}
    assert raw.startswith(key.prefix)


def test_a_revoked_key_is_refused(project):
    key, raw = services.create_api_key(project=project)
    services.revoke_api_key(key=key)
    assert Api(raw).post(manifest()).status_code == 401


def test_an_ingest_only_key_cannot_read(project):
    _, raw = services.create_api_key(project=project, can_ingest=True, can_read=False)
    api = Api(raw)
    assert api.post(manifest()).status_code == 200
    for path in ENDPOINTS:
        assert api.get(path).status_code == 403


def test_a_read_only_key_cannot_ingest(project):
    _, raw = services.create_api_key(project=project, can_ingest=False, can_read=True)
    assert Api(raw).post(manifest()).status_code == 403
    assert Call.objects.count() == 0


def test_a_key_of_project_a_never_reads_project_b(api, other_key):
    api.post(manifest())
    other = Api(other_key)
    assert other.get("/api/v1/runs").json()["results"] == []
    assert other.get("/api/v1/runs/run-1/calls").status_code == 404
    assert other.get("/api/v1/calls/call-1").status_code == 404


def test_the_same_call_id_in_two_projects_is_two_calls(api, other_key):
    assert api.post(manifest()).json()["accepted"] == 1
    r = Api(other_key).post(manifest(step=3))
    assert r.json()["accepted"] == 1
    assert Call.objects.filter(call_id="call-1").count() == 2
    assert api.get("/api/v1/calls/call-1").json()["step"] == 0
    assert Api(other_key).get("/api/v1/calls/call-1").json()["step"] == 3
