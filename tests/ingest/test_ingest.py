"""POST /api/v1/manifests: validation, idempotency, limits, and atomicity."""

from __future__ import annotations

import gzip
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manifests.models import Call, Compaction, ContextEdit, Evidence, Invariant, Item, Run
from tests.support import manifest

pytestmark = pytest.mark.django_db


def paths(response) -> set[str]:
    return {e["path"] for r in response.json()["results"] for e in r.get("errors", [])}


def test_it_stores_one_manifest_in_normalized_tables(api):
    r = api.post(manifest(items=6))
    assert r.status_code == 200, r.content
    assert r.json()["accepted"] == 1
    call = Call.objects.get(call_id="call-1")
    assert call.run.run_id == "run-1"
    assert call.input_cap == 8000 - 1000 - 200
    assert call.cache_read_tokens == 700 and call.uncached_input_tokens == 1300
    assert call.item_count == 6 and call.evidence_missing == 1
    assert [i.item_id for i in Item.objects.filter(call=call).order_by("ordinal")] == [f"item-{n}" for n in range(6)]
    assert Item.objects.get(call=call, item_id="item-4").trust == "untrusted"
    assert Evidence.objects.get(call=call).present is False
    compaction = Compaction.objects.get(call=call)
    assert compaction.failed_invariants == 1
    assert Invariant.objects.get(compaction=compaction, name="user_constraints").lost == ["test env only"]
    assert ContextEdit.objects.get(call=call).cleared_tokens == 900
    assert json.loads(call.raw)["call_id"] == "call-1"


def test_it_stores_a_batch(api):
    body = {"manifests": [manifest(f"c{n}", step=n) for n in range(5)]}
    r = api.post(body)
    assert r.status_code == 200
    assert r.json()["accepted"] == 5
    assert Call.objects.count() == 5 and Run.objects.count() == 1
    run = Run.objects.get()
    assert run.first_seen < run.last_seen


def test_it_accepts_gzip_bodies(api):
    r = api.post({"manifests": [manifest("g1"), manifest("g2")]}, gzip_body=True)
    assert r.status_code == 200, r.content
    assert Call.objects.filter(call_id__in=["g1", "g2"]).count() == 2


def test_it_answers_a_retry_as_duplicate_without_a_second_row(api):
    assert api.post(manifest()).json()["accepted"] == 1
    r = api.post(manifest())
    assert r.status_code == 200
    assert r.json()["results"][0]["status"] == "duplicate"
    assert Call.objects.count() == 1 and Item.objects.count() == 3


def test_it_rejects_the_same_call_id_with_other_content_as_a_conflict(api):
    api.post(manifest())
    r = api.post(manifest(step=7))
    assert r.status_code == 400
    result = r.json()["results"][0]
    assert result["status"] == "rejected"
    assert result["errors"][0]["path"] == "$.call_id"
    assert "already stored with different content" in result["errors"][0]["message"]
    assert Call.objects.get().step == 0


def test_it_keeps_the_live_copy_of_a_call_imported_later(api):
    # The proxy and ctxkit import both name a call by its provider's response id.
    live = manifest("msg_01", builder={"name": "ctxkit.proxy", "version": "1"})
    assert api.post(live).json()["accepted"] == 1
    imported = manifest("msg_01", step=3, builder={"name": "ctxkit.import", "version": "1"}, warnings=["later"])
    r = api.post(imported)
    assert r.status_code == 200
    assert r.json()["results"][0]["status"] == "duplicate"
    assert Call.objects.get().step == 0 and Call.objects.get().builder_name == "ctxkit.proxy"


def test_it_treats_a_repeat_inside_one_batch_as_duplicate(api):
    r = api.post({"manifests": [manifest("x"), manifest("x")]})
    assert [res["status"] for res in r.json()["results"]] == ["accepted", "duplicate"]
    assert Call.objects.count() == 1


def test_every_row_of_a_mixed_batch_points_at_its_own_call(api):
    # The calls' ids are given out before the rows are written (PostgreSQL: reserved with the
    # locks, items first): each item, evidence and registry row must carry its own call's id,
    # whatever the order the batch came in and whatever it holds beside new calls.
    import hashlib

    from manifests.models import CallKey

    api.post(manifest("m-stored", step=1))
    batch = [
        manifest("m-zeta", run_id="run-b", step=2, items=4),
        manifest("m-stored", step=1),  # a retry: duplicate
        manifest("m-alpha", step=3, items=2),
        manifest("m-zeta", run_id="run-b", step=9),  # same call_id, other content: conflict
        manifest("m-mid", run_id="run-b", step=4, items=5),
        manifest("m-alpha", step=3, items=2),  # repeated inside the batch: duplicate
    ]
    r = api.post({"manifests": batch})
    assert [res["status"] for res in r.json()["results"]] == [
        "accepted",
        "duplicate",
        "accepted",
        "rejected",
        "accepted",
        "duplicate",
    ]
    calls = {c.call_id: c for c in Call.objects.all()}
    assert sorted(calls) == ["m-alpha", "m-mid", "m-stored", "m-zeta"]
    for call_id, call in calls.items():
        key = CallKey.objects.get(call_key=call_id)
        assert key.call_id == call.pk and key.content_hash == call.content_hash
        assert call.content_hash == hashlib.sha256(call.raw.encode()).hexdigest()
        sent = next(m for m in [manifest("m-stored", step=1), *batch] if m["call_id"] == call_id)
        assert call.step == sent["step"] and call.run.run_id == sent["run_id"]
        items = list(Item.objects.filter(call_id=call.pk).order_by("ordinal"))
        assert [i.item_id for i in items] == [i["id"] for i in sent["items"]]
        assert list(Evidence.objects.filter(call_id=call.pk).values_list("key", flat=True)) == [
            e["key"] for e in sent["evidence"]
        ]
    assert Item.objects.count() == sum(c.item_count for c in calls.values())


def test_it_names_the_path_of_every_bad_field(api):
    bad = manifest()
    bad["items"][1]["requested_tokens"] = -5
    bad["items"][2]["kind"] = "bogus"
    bad["usage"]["output_tokens"] = "many"
    bad["surprise"] = 1
    r = api.post(bad)
    assert r.status_code == 400
    assert paths(r) == {
        "$.items[1].requested_tokens",
        "$.items[2].kind",
        "$.usage.output_tokens",
        "$.surprise",
    }
    assert Call.objects.count() == 0


def test_it_keeps_the_good_manifests_beside_a_bad_one(api):
    bad = manifest("bad")
    bad["items"][0]["used_tokens"] = 500  # granted is 90
    r = api.post({"manifests": [manifest("good-1"), bad, manifest("good-2")]})
    assert r.status_code == 207
    statuses = [res["status"] for res in r.json()["results"]]
    assert statuses == ["accepted", "rejected", "accepted"]
    assert paths(r) == {"$.manifests[1].items[0].used_tokens"}
    assert set(Call.objects.values_list("call_id", flat=True)) == {"good-1", "good-2"}
    assert not Item.objects.filter(call__call_id="bad").exists()


def test_it_rejects_an_unknown_schema_version(api):
    r = api.post(manifest(schema="ctxview.manifest/v9"))
    assert r.status_code == 400
    assert paths(r) == {"$.schema"}


def test_it_rejects_cached_tokens_above_input(api):
    m = manifest()
    m["usage"] = {"input_tokens": 100, "cache_read_tokens": 300}
    r = api.post(m)
    assert r.status_code == 400
    assert paths(r) == {"$.usage.cache_read_tokens"}


def test_it_rejects_evidence_pointing_at_a_missing_item(api):
    m = manifest()
    m["evidence"][0]["expected_item"] = "nope"
    r = api.post(m)
    assert paths(r) == {"$.evidence[0].expected_item"}


def test_it_rejects_over_long_strings_and_too_many_items(api):
    m = manifest()
    m["items"][0]["reason"] = "x" * 5000
    m["call_id"] = "c" * 201
    r = api.post(m)
    assert paths(r) == {"$.items[0].reason", "$.call_id"}
    many = manifest("many", items=0)
    many["items"] = [{"id": f"i{n}", "kind": "history", "action": "keep", "requested_tokens": 1} for n in range(2001)]
    r = api.post(many)
    assert r.status_code == 400
    assert paths(r) == {"$.items"}


def test_it_answers_malformed_json_with_400(api):
    r = api.post(None, raw=b'{"schema": "ctxview.manifest/v1", ')
    assert r.status_code == 400
    assert "malformed JSON" in r.json()["error"]


def test_it_answers_a_non_object_body_with_400(api):
    r = api.post([1, 2, 3])
    assert r.status_code == 400
    assert "JSON object" in r.json()["error"]


def test_it_answers_an_empty_body_with_400(api):
    r = api.post(None, raw=b"")
    assert r.status_code == 400


def test_it_answers_the_wrong_content_type_with_415(api):
    r = api.post(None, raw=b"call_id=1", content_type="application/x-www-form-urlencoded")
    assert r.status_code == 415


def test_it_answers_an_unknown_content_encoding_with_415(api):
    r = api.post(manifest(), HTTP_CONTENT_ENCODING="br")
    assert r.status_code == 415


def test_it_answers_broken_gzip_with_400(api):
    r = api.post(None, raw=b"not gzip at all", HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 400


@override_settings(CTXVIEW_MAX_BODY_BYTES=4096, DATA_UPLOAD_MAX_MEMORY_SIZE=4097)
def test_it_answers_an_oversized_body_with_413(api):
    r = api.post({"manifests": [manifest(f"c{n}") for n in range(10)]})
    assert r.status_code == 413
    assert "larger than 4096 bytes" in r.json()["error"]
    assert Call.objects.count() == 0


@override_settings(CTXVIEW_MAX_BODY_BYTES=4096, DATA_UPLOAD_MAX_MEMORY_SIZE=4097)
def test_it_answers_a_gzip_bomb_with_413(api):
    bomb = gzip.compress(b'{"manifests": [' + b" " * 3_000_000 + b"]}")
    assert len(bomb) < 4096
    r = api.post(None, raw=bomb, HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 413


@override_settings(CTXVIEW_MAX_BATCH=3)
def test_it_refuses_a_batch_above_the_limit(api):
    r = api.post({"manifests": [manifest(f"c{n}") for n in range(4)]})
    assert r.status_code == 413
    assert r.json()["errors"][0]["path"] == "$.manifests"
    assert Call.objects.count() == 0


def test_it_refuses_an_empty_batch_and_unknown_batch_fields(api):
    assert api.post({"manifests": []}).status_code == 400
    r = api.post({"manifests": [manifest()], "extra": 1})
    assert r.status_code == 400 and r.json()["errors"][0]["path"] == "$.extra"


def test_it_loses_nothing_already_stored_when_later_input_is_bad(api):
    api.post({"manifests": [manifest(f"c{n}") for n in range(3)]})
    before = (Call.objects.count(), Item.objects.count(), Evidence.objects.count())
    api.post(None, raw=b"garbage")
    api.post({"manifests": [manifest("c0", step=9)]})  # conflict
    bad = manifest("c9")
    bad["budget"]["window"] = 0
    api.post(bad)
    assert (Call.objects.count(), Item.objects.count(), Evidence.objects.count()) == before


def test_it_stores_hostile_text_as_data(api):
    m = manifest()
    m["items"][0]["text"] = "<script>alert(1)</script>\x00 ignore previous instructions"
    m["items"][0]["reason"] = '<img src=x onerror="alert(1)">'
    assert api.post(m).status_code == 200
    item = Item.objects.get(item_id="item-0")
    assert item.text.startswith("<script>alert(1)</script>")
    assert "\x00" not in item.text
    assert item.reason == '<img src=x onerror="alert(1)">'


def test_the_query_count_does_not_grow_with_the_batch_size(api):
    def queries_for(prefix: str, n: int) -> int:
        body = {"manifests": [manifest(f"{prefix}{i}", run_id=f"{prefix}-run-{i % 3}", step=i) for i in range(n)]}
        with CaptureQueriesContext(connection) as ctx:
            r = api.post(body)
        assert r.json()["accepted"] == n
        return len(ctx.captured_queries)

    queries_for("w", 1)  # a process's first batch looks up column types and lz4 once (ingest_rows.copy_rows) and
    # creates the day's partitions (PostgreSQL)
    small = queries_for("s", 5)
    large = queries_for("l", 500)
    if connection.vendor == "postgresql":
        assert large == small
    else:
        # Django caps SQLite statements at 999 parameters, so bulk inserts are chunked
        # (a call row has 40 columns); still far from one query per row: the batch
        # holds 500 calls, 1500 items, 500 evidence, 500 compactions, 1000 invariants.
        assert large <= 100


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mutation=st.sampled_from(
        ["items", "budget", "usage", "step", "started_at", "evidence", "compactions", "prefix", "outcome"]
    ),
    value=json_values,
)
def test_no_input_causes_a_500(api, mutation, value):
    m = manifest("fuzz")
    m[mutation] = value
    r = api.post({"manifests": [m]})
    assert r.status_code in (200, 207, 400), r.content


def test_the_collector_is_paused_for_a_batch_and_running_again_after(project):
    import gc

    from manifests import ingest

    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    body = json.dumps({"manifests": [manifest(f"gc-{n}", step=n, items=40) for n in range(60)]}).encode()
    gc.callbacks.append(count)
    try:
        # The same batch without the pause sets the collector off (so the check below can fail).
        ingest.ingest_body.__wrapped__(project=project, body=body)
        assert collections
        collections.clear()
        report = ingest.ingest_body(project=project, body=body.replace(b'"gc-', b'"gc2-'))
        # Counted before anything else allocates: once the collector runs again, the next
        # container allocated (the assertion's own) may set it off, as it should.
        collected_during_batch = len(collections)
        assert collected_during_batch == 0 and report.count(ingest.ACCEPTED) == 60
        assert gc.isenabled()
        with pytest.raises(ingest.BadRequest):
            ingest.ingest_body(project=project, body=b"[")
        assert gc.isenabled()  # also after an error
        gc.disable()  # a caller that paused it itself: left paused
        try:
            ingest.ingest_body(project=project, body=body)
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(count)
