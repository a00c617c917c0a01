"""Property tests of the ingest door (hypothesis): whatever the body, the answer is below
500; every rejected manifest names a path; what is accepted reads back unchanged (NUL
excepted, which becomes U+FFFD by the documented rule)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from manifests.models import Call
from tests.support import manifest

pytestmark = pytest.mark.django_db

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
# Fields a fuzzed value may land in, at every level of the manifest.
PATHS = [("call_id",), ("run_id",), ("step",), ("started_at",), ("ended_at",), ("model",), ("agent",),
         ("budget", "window"), ("usage", "input_tokens"), ("items", 0, "id"), ("items", 0, "position"),
         ("items", 0, "text"), ("items", 1, "requested_tokens"), ("items", 2, "priority"), ("evidence", 0, "key"),
         ("compactions", 0, "kept_turns"), ("context_edits", 0, "cleared_count"), ("outcome", "status"), ("nope",)]


def put(obj: Any, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        obj = obj[part]
    obj[path[-1]] = value


def normalised(value: Any) -> Any:
    """What the door stores for a value: NUL -> U+FFFD in every string."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, dict):
        return {normalised(k): normalised(v) for k, v in value.items()}
    return value


def check_answer(response) -> dict:
    assert response.status_code < 500, response.content[:500]
    data = response.json()
    if "results" not in data:  # the body as a whole was unusable
        assert response.status_code in (400, 413, 415) and data["errors"][0]["path"].startswith("$")
        return data
    for result in data["results"]:
        if result["status"] == "rejected":
            assert result["errors"] and all(e["path"].startswith("$") and e["message"] for e in result["errors"])
    return data


@FUZZ
@given(mutations=st.lists(st.tuples(st.sampled_from(PATHS), json_values), min_size=1, max_size=3),
       call_id=st.text(min_size=1, max_size=40), text=st.text(max_size=200))
def test_a_fuzzed_manifest_is_stored_whole_or_rejected_with_paths(api, mutations, call_id, text):
    m = manifest(call_id)
    m["items"][1]["text"] = text
    for path, value in mutations:
        put(m, path, value)
    data = check_answer(api.post(m))
    result = data["results"][0]
    if result["status"] == "accepted":
        stored = json.loads(Call.objects.get(call_id=result["call_id"]).raw)
        for key in ("call_id", "run_id", "model", "agent", "started_at", "items"):
            if key == "started_at" or key not in m:
                continue
            sent = normalised(m[key])
            if key == "items":
                assert [i.get("text") for i in stored["items"]] == [i.get("text") for i in sent]
                assert [i["id"] for i in stored["items"]] == [i["id"] for i in sent]
            else:
                assert stored[key] == sent
        read = api.get("/api/v1/calls/" + quote(result["call_id"], safe=""))
        assert read.status_code == 200
        assert read.json()["items"][1].get("text") == normalised(m["items"][1].get("text"))


@FUZZ
@given(cut=st.integers(min_value=0, max_value=2000), noise=st.binary(min_size=1, max_size=12),
       batch=st.booleans())
def test_fuzzed_bytes_never_get_a_server_error(api, cut, noise, batch):
    body = json.dumps(manifest("bytes-1")).encode()
    if batch:
        body = b'{"manifests": [' + body + b", " + json.dumps(manifest("bytes-2")).encode() + b"]}"
    at = cut % len(body)
    check_answer(api.post(None, raw=body[:at] + noise + body[at:]))
