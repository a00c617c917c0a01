"""Contract: a manifest built by ctxkit is accepted by the real server, stored whole, and read
back through the API as it was built. The SDK and the server share one schema
(ctxkit.manifest); these tests prove the builder stays inside it end to end."""

from __future__ import annotations

import dataclasses
import gzip
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from ctxkit import Client, ContextBuilder, Manifest, Record, clear_tool_results, compact
from ctxkit.fixtures import (
    DEFAULT_BUDGET,
    HISTORY,
    KEY_FIELDS,
    SMALL_BUDGET,
    TOOL_LOG,
    fixture_segments,
    reserve_for,
)
from ctxkit.manifest import Claim, Outcome
from manifests.models import Call, Compaction, ContextEdit, Evidence, Item

T0 = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
ANTHROPIC_USAGE = {"input_tokens": 210, "cache_read_input_tokens": 600, "cache_creation_input_tokens": 50,
                   "output_tokens": 120}


def history() -> list[Record]:
    records = [Record(id=f"h{n}", role=line.split(":")[0].split("(")[0], text=line)
               for n, line in enumerate(HISTORY.split("\n"))]
    # Two big tool results: the older one is cleared, then the old turns are compacted.
    records += [Record(id="log-1", role="tool", text=TOOL_LOG, ref="log#1", tool_name="bi_query"),
                Record(id="h-next", role="user", text="继续汇总 mini_program 渠道"),
                Record(id="log-2", role="tool", text=TOOL_LOG, ref="log#2", tool_name="bi_query")]
    return records


def build(call_id: str = "contract-1", *, budget: int = DEFAULT_BUDGET, naive: bool = False) -> Manifest:
    """The fixture, with a history that went through clearing and compaction, built by ctxkit."""
    cleared = clear_tool_results(history(), keep_last=1)
    assert cleared.applied
    compacted = compact(cleared.records, keep_last=2, constraints=["不要再访问外网"],
                        required_evidence=["429", "除以 100", "a literal nobody wrote"])
    assert compacted.performed and not compacted.ok  # a failed invariant must reach the server too
    live = "\n".join(r.text for r in compacted.model_records())
    segments = [dataclasses.replace(s, text=live) if s.name == "history" else s for s in fixture_segments()]
    builder = ContextBuilder(budget=budget, reserve=0 if naive else reserve_for(budget), naive=naive,
                             key_fields=KEY_FIELDS)
    built = builder.build(segments)
    return built.manifest(
        call_id=call_id,
        run_id="contract-run",
        step=3,
        model="claude-sonnet-4-5",
        provider="anthropic",
        agent="refund-analyst",
        usage=ANTHROPIC_USAGE,
        compactions=[compacted],
        edits=[cleared],
        records=compacted.new_history,
        started_at=T0,
        ended_at=T0 + timedelta(seconds=2),
        outcome=Outcome(finish_reason="end_turn", claims=[Claim(text="0.0321", evidence_keys=["refund_rate"])]),
        cwd="/home/dev/退款/<repo>",
        git_branch="feat/refunds",
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("budget", "naive"), [(SMALL_BUDGET, True), (SMALL_BUDGET, False), (DEFAULT_BUDGET, False)])
def test_a_ctxkit_manifest_is_accepted_stored_whole_and_read_back_as_built(api, budget, naive):
    m = build(budget=budget, naive=naive)
    assert m.compactions and m.context_edits and any(i.action == "clear" for i in m.items)

    r = api.post(None, raw=msgspec.json.encode(m))
    assert r.status_code == 200, r.content
    assert r.json()["results"][0]["status"] == "accepted", r.json()

    call = Call.objects.get(call_id=m.call_id)
    assert call.item_count == len(m.items) == Item.objects.filter(call=call).count()
    assert Evidence.objects.filter(call=call).count() == len(m.evidence)
    assert Compaction.objects.get(call=call).failed_invariants == 1
    assert ContextEdit.objects.get(call=call).item_ids == m.context_edits[0].item_ids

    got = api.get(f"/api/v1/calls/{m.call_id}").json()
    assert [i["id"] for i in got["items"]] == [i.id for i in m.items]
    assert [i["action"] for i in got["items"]] == [i.action for i in m.items]
    assert [(i["zone"], i["position"], i["trust"]) for i in got["items"]] == [
        (i.zone, i.position, i.trust) for i in m.items]
    assert [(i["granted_tokens"], i["used_tokens"]) for i in got["items"]] == [
        (i.granted_tokens, i.used_tokens) for i in m.items]
    assert [(e["key"], e["present"], e["found_in"], e["used"]) for e in got["evidence"]] == [
        (e.key, e.present, e.found_in, e.used) for e in m.evidence]
    assert (got["input_tokens"], got["cache_read_tokens"], got["cache_write_tokens"]) == (860, 600, 50)
    assert got["prefix_hash"] == (m.prefix.hash if m.prefix else "")
    lost = {i["name"]: i["lost"] for i in got["compactions"][0]["invariants"]}
    assert lost["required_evidence"] == ["a literal nobody wrote"]
    run = api.get("/api/v1/runs").json()["results"][0]
    assert (run["cwd"], run["git_branch"]) == ("/home/dev/退款/<repo>", "feat/refunds")


@pytest.mark.django_db
def test_the_same_build_twice_is_a_duplicate_not_a_conflict(api):
    # The builder is deterministic, so a retried call (same call_id, same build) is harmless.
    first, second = build("contract-dup"), build("contract-dup")
    body = gzip.compress(msgspec.json.encode({"manifests": [first, second]}))
    r = api.post(None, raw=body, HTTP_CONTENT_ENCODING="gzip")
    assert [x["status"] for x in r.json()["results"]] == ["accepted", "duplicate"]
    assert Call.objects.filter(call_id="contract-dup").count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_ctxkit_client_delivers_a_built_manifest_to_the_running_server(live_server, key):
    m = build("contract-live")
    client = Client(key, live_server.url, flush_interval=0.05, max_retries=1)
    try:
        assert client.capture(m) is True
        assert client.flush(timeout=20)
    finally:
        client.shutdown(timeout=5)
    assert client.stats()["sent"] == 1 and client.stats()["rejected"] == 0
    assert Call.objects.get(call_id="contract-live").item_count == len(m.items)
