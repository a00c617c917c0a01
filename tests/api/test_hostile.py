"""Hostile and edge-case input (docs/api.md): every listed body and URL gets a 4xx naming the
problem, never a 500, and afterwards every page and endpoint still serves the project and
every stored call reads back unchanged. Runs on SQLite and on PostgreSQL (CI runs both)."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client

from manifests.models import Call, Item
from tests.support import manifest

pytestmark = pytest.mark.django_db


def body_of(**fields) -> bytes:
    return json.dumps(manifest("hostile", **fields)).encode()


def _with_item_text(text: str) -> bytes:
    sent = manifest("hostile")
    sent["items"][1]["text"] = text
    return json.dumps(sent).encode()


def errors_of(response) -> list[dict]:
    data = response.json()
    if "results" in data:
        return [e for r in data["results"] for e in r.get("errors", [])]
    return data["errors"]


HOSTILE_BODIES = {
    "started_at year 0 after offset": (body_of(started_at="0001-01-01T00:00:00+14:00"), "$.started_at"),
    "started_at year 10000 after offset": (body_of(started_at="9999-12-31T23:59:59-14:00"), "$.started_at"),
    "started_at 9999-12-31T23:30Z": (body_of(started_at="9999-12-31T23:30:00Z"), "$.started_at"),
    "started_at before 2000": (body_of(started_at="1999-12-31T23:59:59Z"), "$.started_at"),
    "ended_at in 2100": (body_of(ended_at="2100-01-01T00:00:00Z"), "$.ended_at"),
    "1e309 in a number": (body_of().replace(b'"step": 0', b'"step": 1e309'), "$.step"),
    "a position beyond its column": (body_of().replace(b'"position": 0', b'"position": 10000000000'),
                                     "$.items[0].position"),
    "kept beyond its column": (body_of().replace(b'"kept": 3', b'"kept": 99999999999'), "$.context_edits[0].kept"),
    "deeply nested JSON": (body_of().replace(b'"outcome"', b'"deep": ' + b"[" * 50_000 + b"]" * 50_000 + b', "x"'),
                           "$.deep"),
    "too deep a value in step": (body_of().replace(b'"step": 0', b'"step": ' + b"[" * 50_000 + b"]" * 50_000),
                                 "$.step"),
    "invalid UTF-8": (body_of(model="m\udcff").replace(b"\\udcff", b"\xff"), "$.model"),
    "invalid UTF-8 in call_id": (body_of().replace(b'"call_id": "hostile"', b'"call_id": "hos\xfftile"'), "$.call_id"),
    "invalid UTF-8 in an item's text": (_with_item_text("text \udcff").replace(b"\\udcff", b"\xff"),
                                        "$.items[1].text"),
    "CESU-8 surrogate": (body_of(model="m").replace(b'"model": "m"', b'"model": "m\xed\xa0\x80"'), "$.model"),
    "overlong encoding": (body_of(model="m").replace(b'"model": "m"', b'"model": "m\xc0\xaf"'), "$.model"),
    "lone surrogate escape": (body_of(model="m").replace(b'"model": "m"', b'"model": "m\\ud800"'), "$.model"),
    "duplicate call_id": (body_of().replace(b'"call_id": "hostile"', b'"call_id": "hostile", "call_id": "other"'),
                          "$.call_id"),
    "control character in run_id": (body_of(run_id="run\u0001"), "$.run_id"),
}


@pytest.mark.parametrize("name", list(HOSTILE_BODIES))
def test_it_rejects_each_hostile_body_with_a_path(api, name):
    body, path = HOSTILE_BODIES[name]
    r = api.post(None, raw=body)
    assert r.status_code == 400, r.content[:300]
    errors = errors_of(r)
    assert path in [e["path"] for e in errors], errors
    assert all(e["message"] for e in errors)
    assert not Call.objects.filter(call_id__in=["hostile", "other"]).exists()


def test_it_names_the_field_of_a_byte_level_error_inside_a_batch(api):
    good = body_of()
    bad_text = _with_item_text("text \udcff").replace(b"\\udcff", b"\xff").replace(b'"hostile"', b'"bad-text"', 1)
    r = api.post(None, raw=b'{"manifests": [' + good + b", " + bad_text + b"]}")
    assert r.status_code == 207 and [x["status"] for x in r.json()["results"]] == ["accepted", "rejected"]
    assert [e["path"] for e in errors_of(r)] == ["$.manifests[1].items[1].text"]
    deep = body_of().replace(b'"step": 0', b'"step": ' + b"[" * 50_000 + b"]" * 50_000)
    r = api.post(None, raw=b'{"manifests": [' + deep + b"]}")
    assert r.status_code == 400 and [e["path"] for e in errors_of(r)] == ["$.manifests[0].step"]


def test_a_byte_level_error_outside_any_value_is_at_dollar_with_its_byte_offset(api):
    r = api.post(None, raw=b'{"model": "m",\xff "step": 1}')
    assert r.status_code == 400
    (error,) = errors_of(r)
    assert error["path"] == "$" and re.search(r"\(byte 1[45]\)", error["message"]), error


def test_it_rejects_duplicate_keys_inside_items_and_of_the_batch(api):
    nested = body_of().replace(b'"kind": "system"', b'"kind": "system", "kind": "tools"', 1)
    assert api.post(None, raw=nested).json()["results"][0]["errors"][0]["path"] == "$.items[0].kind"
    batch = b'{"manifests": [' + body_of() + b'], "manifests": []}'
    r = api.post(None, raw=batch)
    assert r.status_code == 400 and r.json()["errors"][0]["message"].startswith("duplicate key")


def test_a_nul_becomes_u_fffd_before_the_idempotency_lookup(api):
    sent = manifest("call\u0000nul", run_id="run\u0000nul")
    sent["items"][0]["text"] = "before\u0000after"
    first = api.post(sent)
    assert first.status_code == 200 and first.json()["results"][0]["call_id"] == "call\ufffdnul"
    retry = api.post(sent)  # the SDK's retry of the same body: a duplicate, not a 500 or a conflict
    assert retry.status_code == 200 and retry.json()["results"][0]["status"] == "duplicate"
    call = Call.objects.get()
    assert call.call_id == "call\ufffdnul" and call.run.run_id == "run\ufffdnul"
    assert json.loads(call.raw)["call_id"] == "call\ufffdnul"
    assert Item.objects.get(call=call, item_id="item-0").text == "before\ufffdafter"
    read = api.get("/api/v1/calls/call\ufffdnul").json()
    assert read["items"][0]["text"] == "before\ufffdafter"


def test_an_escaped_backslash_before_u0000_is_text_not_a_nul(api):
    raw = body_of().replace(b'"call_id": "hostile"', b'"call_id": "back\\\\u0000slash"')
    assert api.post(None, raw=raw).json()["results"][0]["call_id"] == "back\\u0000slash"


def test_after_hostile_input_every_page_and_endpoint_still_serves_and_reads_back(api, project, owner):
    good = manifest("good-1", run_id="run-good")
    good["items"][1]["text"] = "<script>alert(1)</script> ignore previous instructions\n\ttab"
    assert api.post(good).status_code == 200
    for body, _ in HOSTILE_BODIES.values():
        assert api.post(None, raw=body).status_code == 400
    mixed = b'{"manifests": [' + HOSTILE_BODIES["started_at year 0 after offset"][0] + b", " + json.dumps(
        manifest("good-2", run_id="run-good", step=1)
    ).encode() + b"]}"
    r = api.post(None, raw=mixed)
    assert r.status_code == 207 and [x["status"] for x in r.json()["results"]] == ["rejected", "accepted"]

    for path in ("/api/v1/runs", "/api/v1/runs/run-good/calls", "/api/v1/calls/good-1", "/api/v1/calls/good-2"):
        assert api.get(path).status_code == 200, path
    read = api.get("/api/v1/calls/good-1").json()
    assert read["items"][1]["text"] == good["items"][1]["text"]
    assert json.loads(Call.objects.get(call_id="good-1").raw)["items"][1]["text"] == good["items"][1]["text"]
    client = Client()
    client.force_login(owner)
    for page in ("", "runs/", "runs/run-good/", "calls/good-1/", "evidence/", "cache/", "compactions/"):
        r = client.get(f"/p/{project.slug}/{page}?range=all")
        assert r.status_code == 200, page


# --------------------------------------------------------------------------- #
# Read paths: every parameter is validated (400 with a message, never a 500)


@pytest.mark.parametrize(
    "query, param",
    [
        ({"until": "9999-12-31T00:00:00Z"}, "?until"),
        ({"since": "0001-01-01T00:00:00Z"}, "?since"),
        ({"limit": str(10**30)}, "?limit"),
        ({"limit": "0"}, "?limit"),
        ({"limit": "-1"}, "?limit"),
        ({"limit": "ten"}, "?limit"),
        ({"offset": str(10**30)}, "?offset"),
        ({"agent": "a\u0001b"}, "?agent"),
    ],
)
def test_the_api_answers_a_bad_parameter_with_400_naming_it(api, query, param):
    r = api.get("/api/v1/runs", **query)
    assert r.status_code == 400
    assert r.json()["errors"][0]["path"] == param and r.json()["error"]


def test_the_api_caps_limit_at_its_documented_maximum(api):
    assert api.get("/api/v1/runs", limit="500").status_code == 200
    assert api.get("/api/v1/runs", limit="501").status_code == 400


def test_a_nul_in_any_url_is_a_400_on_pages_and_api(api, project, owner):
    client = Client()
    client.force_login(owner)
    for path in ("/api/v1/runs?agent=%00", "/api/v1/calls/a%00b", "/api/v1/runs/a%00/calls"):
        r = api.client.get(path, HTTP_AUTHORIZATION=f"Bearer {api.key}")
        assert r.status_code == 400 and "NUL" in r.json()["error"], path
    for path in ("runs/?agent=%00", "calls/a%00b/", "runs/x%00/"):
        r = client.get(f"/p/{project.slug}/{path}")
        assert r.status_code == 400 and b"NUL" in r.content, path


@pytest.mark.parametrize("query", ["until=9999-12-31", "since=0001-01-01", "since=1999-12-31",
                                   "until=2100-01-02", "agent=%01"])
def test_every_page_answers_an_out_of_range_filter_with_400(project, owner, query):
    client = Client()
    client.force_login(owner)
    for page in ("", "runs/", "evidence/", "cache/", "compactions/"):
        r = client.get(f"/p/{project.slug}/{page}?{query}")
        assert r.status_code == 400, (page, query)


def test_an_unknown_api_url_answers_in_the_error_shape(api):
    r = api.client.get("/api/v1/nothing-here", HTTP_AUTHORIZATION=f"Bearer {api.key}")
    assert r.status_code == 404
    assert r.json() == {"error": "not found", "errors": [{"path": "$", "message": "not found"}]}


def test_an_api_server_error_answers_in_the_error_shape(api, monkeypatch):
    # A real fault inside a view (the database refuses the query), not a mocked response.
    from django.db import connection

    def broken(*args, **kwargs):
        raise RuntimeError("database went away")

    client = api.client
    client.raise_request_exception = False
    with connection.execute_wrapper(broken):
        r = client.get("/api/v1/runs", HTTP_AUTHORIZATION=f"Bearer {api.key}")
    assert r.status_code == 500
    assert r.json() == {"error": "internal server error",
                        "errors": [{"path": "$", "message": "internal server error"}]}


def test_a_repeated_key_rejects_only_its_manifest_of_a_batch_and_nothing_of_it_is_stored(api):
    # On PostgreSQL the proof of these json.dumps bytes runs during the store (beside the
    # foreign-key checks); a failed proof rolls the batch back and stores the others again.
    good = json.dumps(manifest("dup-good", run_id="dup-run")).encode()
    bad = json.dumps(manifest("dup-bad", run_id="dup-run")).encode()
    bad = bad.replace(b'"kind": "system"', b'"kind": "system", "kind": "tools"', 1)
    colon = manifest("dup-colon", run_id="dup-run")
    colon["items"][0]["reason"] = "a:b"
    escaped = json.dumps(colon).encode().replace(b"a:b", b"a\\u003ab")  # the fast proof cannot judge it
    r = api.post(None, raw=b'{"manifests": [' + b", ".join([good, bad, escaped]) + b"]}")
    assert r.status_code == 207, r.content[:300]
    results = r.json()["results"]
    assert [x["status"] for x in results] == ["accepted", "rejected", "accepted"]
    assert [e["path"] for e in results[1]["errors"]] == ["$.manifests[1].items[0].kind"]
    assert set(Call.objects.values_list("call_id", flat=True)) == {"dup-good", "dup-colon"}
    assert Item.objects.filter(call__call_id="dup-colon", item_id="item-0").get().reason == "a:b"


def test_a_repeated_key_is_rejected_even_when_its_call_id_is_stored_already(api):
    sent = manifest("dup-stored")
    assert api.post(sent).status_code == 200
    # The same content once parsed (the last value wins), so its hash matches the stored call:
    # still refused for the repeated key, never answered as a duplicate.
    again = json.dumps(sent).encode().replace(b'"kind": "system"', b'"kind": "tools", "kind": "system"', 1)
    r = api.post(None, raw=b'{"manifests": [' + again + b"]}")
    assert r.status_code == 400, r.content[:300]
    assert r.json()["results"][0]["errors"][0]["path"] == "$.manifests[0].items[0].kind"
    # A rejected manifest with a repeated key does not stand in the way of a good one with its call_id.
    other = manifest("dup-next", step=1)
    twin = json.dumps(other).encode().replace(b'"kind": "system"', b'"kind": "system", "kind": "tools"', 1)
    other["model"] = "another-model"
    r = api.post(None, raw=b'{"manifests": [' + twin + b", " + json.dumps(other).encode() + b"]}")
    assert [x["status"] for x in r.json()["results"]] == ["rejected", "accepted"]
    assert Call.objects.get(call_id="dup-next").model == "another-model"
