"""The what-if replay at a call's own budget reproduces what ctxkit's allocator did, exactly.

Candidate sets are generated (every policy, floors, equal and aged priorities, pinned segments,
exact duplicates, repeated lines, JSON, CJK, naive mode, text sent or not, a custom estimator),
built and recorded by ctxkit's ContextBuilder, stored through the ingest service and replayed
from the database. A call without replay settings is replayed too, and labelled approximate.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkit import Block, ContextBuilder, KeyField, Segment, estimate_tokens, figures
from ctxkit.manifest import POLICIES
from manifests import replay
from manifests.ingest import ingest_body
from manifests.models import Call

pytestmark = pytest.mark.django_db

_ids = itertools.count()
_words = st.sampled_from(["alpha", "beta", "HTTP 429", "rate limit", "除以 100", "retry after 30s", "ok", "{"])
_line = st.lists(_words, min_size=1, max_size=6).map(" ".join)


@st.composite
def _text(draw) -> str:
    shape = draw(st.sampled_from(["lines", "repeats", "json", "empty"]))
    if shape == "empty":
        return ""
    if shape == "json":
        return json.dumps({"status": draw(st.integers(100, 599)),
                           "body": draw(st.lists(_line, min_size=1, max_size=12))})
    lines = draw(st.lists(_line, min_size=1, max_size=30))
    if shape == "repeats":  # lossless line dedupe has something to remove
        lines = lines + lines[: draw(st.integers(1, len(lines)))]
    return "\n".join(lines)


@st.composite
def _segments(draw) -> list[Segment]:
    n = draw(st.integers(1, 9))
    out: list[Segment] = []
    for i in range(n):
        text = draw(_text())
        if out and draw(st.booleans()) and draw(st.booleans()):  # an exact duplicate of an earlier one
            text = out[draw(st.integers(0, len(out) - 1))].text
        policy = draw(st.sampled_from(POLICIES))
        out.append(Segment(
            name=f"s{i}",
            kind=draw(st.sampled_from(["system", "tools", "history", "tool_result", "retrieval", "memory", "task"])),
            text=text,
            priority=draw(st.sampled_from([0, 10, 50, 50, 90, 1000])),
            policy=policy,
            min_tokens=draw(st.sampled_from([0, 0, 5, 40])),
            source_ref=draw(st.sampled_from([None, "logs/run.txt"])),
            near_dupes=draw(st.booleans()),
            keep_recent=draw(st.integers(0, 4)),
            pinned_lines=tuple(text.split("\n")[:1]) if policy == "window" and text and draw(st.booleans()) else (),
        ))
    return out


def _custom_estimate(text: str) -> int:  # an agent's own counter: the server cannot run it
    return -(-len(text) // 3)


def _store(project, manifest) -> Call:
    report = ingest_body(project=project, body=msgspec.json.encode(manifest))
    assert report.results[0].status == "accepted", report.results[0].errors
    return Call.objects.get(project=project, call_id=manifest.call_id)


def _replay_own(call: Call) -> dict:
    return replay.replay(call, list(call.items.order_by("ordinal")), list(call.evidence.all()),
                         replay.parse_params({}, call))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    segments=_segments(),
    budget=st.integers(20, 900),
    reserve=st.integers(0, 200),
    margin=st.sampled_from([0, 0, 10]),
    naive=st.booleans(),
    custom=st.booleans(),
    include_text=st.booleans(),
    starved=st.sampled_from([0, 7, 60]),
    question=st.booleans(),
)
def test_it_reproduces_every_allocation_of_an_sdk_built_call(
    project, segments, budget, reserve, margin, naive, custom, include_text, starved, question
):
    reserve = min(reserve, budget - margin)
    builder = ContextBuilder(budget=budget, reserve=reserve, safety_margin=margin, naive=naive,
                             estimate=_custom_estimate if custom else estimate_tokens,
                             key_fields=[KeyField("429", "429", segments[0].name, key="rl")])
    builder.aging = {s.name: starved for s in segments[::2]}  # carried over from earlier calls
    blocks = [Block(id="question", kind="user", text="why did it fail?")] if question else []
    built = builder.build(segments, blocks=blocks)
    n = next(_ids)
    manifest = built.manifest(call_id=f"gen-{n}", run_id=f"gen-{n}", step=0, model="m", include_text=include_text)
    call = _store(project, manifest)

    result = _replay_own(call)

    assert result["fidelity"]["exact"] is True
    rows = {r["id"]: r for r in result["items"]}
    plan = {a.name: a for a in built.plan.allocations}
    for item in manifest.items:
        if item.id in plan and item.action not in replay.SKIPPED_ACTIONS:
            row = rows[item.id]
            assert (row["replay"]["action"], row["replay"]["granted"], row["replay"]["used"]) == (
                item.action, item.granted_tokens, item.used_tokens), (item.id, row)
            assert row["policy"] == plan[item.id].policy and row["policy_recorded"]
            assert not row["changed"]
        else:  # a duplicate, or not the allocator's (the question): listed as skipped, never re-allocated
            assert item.id not in rows and item.id in {s["id"] for s in result["skipped"]}
    assert result["used"] == sum(a.used for a in built.plan.allocations if a.name in rows)
    assert result["summary"]["baseline_same_action"] == result["summary"]["items"]
    # Headroom has one meaning: at its own budget the replay gives the call's own headroom.
    read = figures.input_read(call.input_tokens, figures.total_context_tokens(call.items.all()))
    assert result["actual"]["headroom"] == figures.headroom(call.input_cap, read)
    assert (result["input_read"], result["headroom"]) == (read, result["actual"]["headroom"])


def test_it_records_policy_floor_aging_and_estimator_in_the_manifest():
    builder = ContextBuilder(budget=300, reserve=50, aging={"log": 2})
    built = builder.build([
        Segment(name="sys", kind="system", text="You are careful.", policy="pin"),
        Segment(name="log", kind="tool_result", priority=20,
                text="\n".join(["a long repeated log line here", "HTTP 429 Too Many Requests"] * 40),
                policy="truncate", min_tokens=30),
    ])
    m = built.manifest(call_id="c", run_id="r", step=0, model="m")
    items = {i.id: i for i in m.items}
    assert m.allocator is not None and (m.allocator.mode, m.allocator.estimator) == ("priority", "ctxkit")
    assert items["sys"].allocation.policy == "pin"
    log = items["log"].allocation
    assert (log.policy, log.min_tokens, log.effective_priority, log.lossless) == ("truncate", 30, 22, True)
    # Optional fields of v1: a manifest without them is still valid, and the server keeps them.
    assert "allocation" in msgspec.json.encode(m).decode()


def test_it_labels_a_replay_without_settings_as_an_approximation(project):
    t = datetime(2026, 11, 29, tzinfo=UTC).isoformat()
    body = {"schema": "ctxview.manifest/v1", "call_id": "hand/1", "run_id": "hand", "step": 0, "model": "m",
            "started_at": t, "budget": {"window": 1000, "output_reserve": 100},
            "builder": {"name": "langgraph", "version": "0.3"},
            "items": [{"id": "log", "kind": "tool_result", "action": "truncate", "requested_tokens": 900,
                       "granted_tokens": 300, "used_tokens": 280, "priority": 20}]}
    report = ingest_body(project=project, body=json.dumps(body).encode())
    assert report.results[0].status == "accepted"
    result = _replay_own(Call.objects.get(project=project, call_id="hand/1"))
    assert result["fidelity"]["exact"] is False
    assert "langgraph 0.3" in result["fidelity"]["why"][0] and "assumed" in result["fidelity"]["why"][0]
    assert result["items"][0]["policy"] == "truncate" and result["items"][0]["policy_recorded"] is False


def test_it_says_when_the_calls_estimator_cannot_run_on_the_server(project):
    built = ContextBuilder(budget=200, reserve=20, estimate=_custom_estimate).build(
        [Segment(name="doc", kind="retrieval", text="word " * 400, priority=50, policy="extract")])
    call = _store(project, built.manifest(call_id="custom/1", run_id="custom", step=0, model="m"))
    result = _replay_own(call)
    assert result["fidelity"]["exact"] is True and result["fidelity"]["estimator"].startswith("custom:")
    assert "cannot run" in result["fidelity"]["why"][0]
    row = result["items"][0]
    assert (row["replay"]["granted"], row["replay"]["action"]) == (row["actual"]["granted"], row["actual"]["action"])
