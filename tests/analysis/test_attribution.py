"""Drop attribution: one cause per missing piece of evidence, with its fix, item and decision."""

from __future__ import annotations

import pytest

from ctxkit.context.allocator import Segment
from ctxkit.context.compaction import Record, Summary, compact
from ctxkit.context.readback import KeyField
from ctxkit.manifest import Claim, Compaction, Evidence, Invariant, Outcome, Usage
from ctxkit.record.builder import ContextBuilder
from manifests import analysis
from manifests.models import Attribution, CallFigures
from tests.analysis.support import flush_rollups, item
from tests.support import MODEL, T0, manifest, store_and_analyse

pytestmark = pytest.mark.django_db

# The 429 sits in the middle of the log: a head/tail cut removes it.
LOG = "\n".join(["GET /refunds/R-17"] + [f"line {n} ok" for n in range(100)] + ["HTTP 429 Too Many Requests"]
                + [f"line {n} ok" for n in range(100, 200)])
POLICY = "Refund policy: refunds over 500 need approval by a second person. " * 20


def built_call(project, key_fields, segments=None, budget=600, **kwargs):
    """A call built the way an agent builds it: allocate -> layout -> read back, by ctxkit."""
    segments = segments or [
        Segment(name="system", kind="system", text="You are a careful refund analyst.", policy="pin", priority=100),
        Segment(name="task", kind="task", text="Find why refund R-17 failed.", policy="pin", priority=90),
        Segment(name="log", kind="tool_result", text=LOG, policy="truncate", priority=20),
        Segment(name="policy", kind="retrieval", text=POLICY, policy="drop", priority=1),
    ]
    built = ContextBuilder(budget=budget, reserve=200, key_fields=key_fields).build(segments)
    m = built.manifest(call_id="c1", run_id="r1", step=0, model=MODEL, started_at=T0,
                       usage=Usage(input_tokens=800, output_tokens=50), **kwargs)
    return store_and_analyse(project, [m])[0]


def only(call, key, *, risk=False):
    rows = list(Attribution.objects.filter(call=call, evidence_key=key, is_risk=risk))
    assert len(rows) == 1, [(r.cause, r.item_id) for r in rows]
    return rows[0]


def test_it_attributes_evidence_the_allocator_dropped_to_the_budget_policy(project):
    call = built_call(project, [KeyField(label="approval", literal="need approval", source="policy", key="approval")])
    row = only(call, "approval")
    assert row.cause == Attribution.BUDGET
    assert row.fix.startswith("Budget policy")
    assert (row.item_id, row.action) == ("policy", "drop")
    assert "policy got" in row.reason  # the allocator's own words for the decision
    assert row.evidence.key == "approval" and row.evidence.present is False
    assert row.started_at == call.started_at and row.project_id == project.pk


def test_it_attributes_evidence_cut_out_of_a_truncated_log_to_the_truncation_policy(project):
    call = built_call(project, [KeyField(label="429", literal="429", source="log", key="rate-limit")])
    row = only(call, "rate-limit")
    assert row.cause == Attribution.TRUNCATED
    assert row.fix.startswith("Truncation policy")
    assert (row.item_id, row.action) == ("log", "truncate")
    assert "head" in row.reason and "tail" in row.reason


def test_it_attributes_evidence_no_candidate_carried_to_retrieval(project):
    call = built_call(project, [KeyField(label="ticket", literal="TICKET-9", source="ticket", key="ticket")])
    row = only(call, "ticket")
    assert row.cause == Attribution.NEVER_CANDIDATE
    assert row.fix.startswith("Retrieval")
    assert row.item_id == "" and "no candidate item" in row.reason


def test_it_attributes_evidence_expected_from_a_missing_item_to_retrieval(project):
    m = manifest(items=3, evidence=[{"key": "invoice", "present": False, "expected_item": "item-1"}])
    m["items"] = [i for i in m["items"] if i["id"] != "item-1"]
    m["evidence"][0]["expected_item"] = None
    call = store_and_analyse(project, [m])[0]
    assert only(call, "invoice").cause == Attribution.NEVER_CANDIDATE


def test_it_attributes_a_kept_item_without_the_evidence_to_retrieval(project):
    m = manifest("c1", bare=True, items=[item("doc", action="keep", reason="top-1 by similarity")],
                 evidence=[Evidence(key="rate", literal="3.5%", expected_item="doc", present=False)])
    row = only(store_and_analyse(project, [m])[0], "rate")
    assert row.cause == Attribution.NEVER_CANDIDATE
    assert (row.item_id, row.action) == ("doc", "keep")
    assert "kept whole but did not contain" in row.reason and "top-1 by similarity" in row.reason


def test_it_attributes_evidence_folded_into_a_summary_that_lost_it_to_the_compactor(project):
    history = [
        Record(id="m1", role="user", text="Amounts are in cents: divide by 100 before comparing.", turn=1),
        Record(id="m2", role="assistant", text="Understood.", turn=1),
        Record(id="m3", role="user", text="Refund R-17 failed yesterday.", turn=2),
        Record(id="m4", role="assistant", text="Looking at the logs.", turn=2),
    ]
    result = compact(history, keep_last=1, summarizer=lambda records: Summary(facts=["refund R-17 failed"]),
                     required_evidence=["divide by 100"], trigger="occupancy 0.82 >= 0.80")
    assert result.performed and not result.ok
    m = manifest(
        "c1", bare=True,
        items=[item("task", kind="task"), item(result.summary.id, kind="summary", action="keep", tokens=20)],
        evidence=[Evidence(key="unit", label="cents", literal="divide by 100", expected_item="task", present=False)],
        compactions=[result.to_manifest()],
    )
    row = only(store_and_analyse(project, [m])[0], "unit")
    assert row.cause == Attribution.COMPACTION
    assert row.fix.startswith("Compactor")
    # The summary it was folded into, and the failed invariant as the decision.
    assert row.item_id == result.summary.id
    assert "required_evidence" in row.reason or "missing after compaction" in row.reason


def test_it_attributes_evidence_of_a_summarized_item_to_the_compactor(project):
    m = manifest("c1", bare=True, items=[item("history", kind="history", action="summarize", tokens=80, requested=500,
                                   reason="history got 79 tokens at budget 800; summarized to the grant")],
                 evidence=[Evidence(key="unit", literal="divide by 100", expected_item="history", present=False)])
    row = only(store_and_analyse(project, [m])[0], "unit")
    assert (row.cause, row.item_id, row.action) == (Attribution.COMPACTION, "history", "summarize")
    assert "history got 79 tokens" in row.reason


def test_it_attributes_present_evidence_the_answer_marked_unused_to_the_model_or_prompt(project):
    m = manifest("c1", bare=True, items=[item("log", kind="tool_result", zone="tail")],
                 evidence=[Evidence(key="rate-limit", literal="429", expected_item="log", present=True,
                                    found_in="log", used=False)])
    row = only(store_and_analyse(project, [m])[0], "rate-limit", risk=True)
    assert row.cause == Attribution.NOT_USED
    assert row.fix.startswith("Model / prompt")
    assert row.item_id == "log" and row.reason.startswith("marked not used")


def test_it_finds_unused_evidence_from_the_claims_when_used_is_not_sent(project):
    m = manifest(items=2)
    m["evidence"] = [
        {"key": "cited", "present": True, "found_in": "item-0"},
        {"key": "ignored", "present": True, "found_in": "item-1"},
    ]
    m["outcome"]["claims"] = [{"text": "The refund failed on a rate limit", "evidence_keys": ["cited"]}]
    for it in m["items"]:
        it["zone"] = "tail"  # no middle-zone risk: only the unused one
    call = store_and_analyse(project, [m])[0]
    assert not Attribution.objects.filter(call=call, is_risk=False).exists()  # nothing is missing
    causes = {(a.evidence_key, a.cause) for a in Attribution.objects.filter(call=call, is_risk=True)}
    assert causes == {("ignored", Attribution.NOT_USED)}
    assert "claims do not cite it" in only(call, "ignored", risk=True).reason


def test_it_does_not_call_evidence_unused_without_claims_or_used(project):
    m = manifest("c1", bare=True, items=[item("log", kind="tool_result", zone="tail")],
                 evidence=[Evidence(key="k", expected_item="log", present=True, found_in="log")])
    call = store_and_analyse(project, [m])[0]
    assert not Attribution.objects.filter(call=call).exists()


def test_it_flags_present_evidence_placed_in_the_middle_zone_as_a_risk(project):
    history = "\n".join(f"turn {n}: the user asked about order {n}" for n in range(30))
    segments = [
        Segment(name="system", kind="system", text="You are a careful refund analyst.", policy="pin", priority=100),
        Segment(name="history", kind="history", text=history + "\namounts are in cents: divide by 100",
                policy="summarize", priority=30),
        Segment(name="question", kind="user", text="Why did refund R-17 fail?", policy="pin", priority=100),
    ]
    call = built_call(project, [KeyField(label="cents", literal="divide by 100", source="history", key="unit")],
                      segments=segments, budget=4000, outcome=Outcome(claims=[Claim(text="x", evidence_keys=["unit"])]))
    rows = list(Attribution.objects.filter(call=call))
    assert [(r.cause, r.is_risk, r.item_id) for r in rows] == [(Attribution.MIDDLE_ZONE, True, "history")]
    assert rows[0].fix.startswith("Layout (risk)") and "zone middle" in rows[0].reason
    assert 0.25 <= call.figures.evidence_positions["unit"] <= 0.75


def test_it_uses_the_relative_position_when_an_item_has_no_zone(project):
    items = [item("head", kind="system", tokens=1000), item("doc", tokens=100), item("tail", kind="user", tokens=1000)]
    m = manifest("c1", bare=True, items=items,
                 evidence=[Evidence(key="k", expected_item="doc", present=True, found_in="doc", used=True)])
    call = store_and_analyse(project, [m])[0]
    row = Attribution.objects.get(call=call)
    assert (row.cause, row.is_risk) == (Attribution.MIDDLE_ZONE, True)
    assert "at 50% of the context" in row.reason


def test_it_prefers_a_failed_compaction_invariant_over_the_item_decision(project):
    lost = Invariant(name="required_evidence", ok=False, detail="lost the unit", lost=["Divide by 100"])
    compaction = Compaction(id="cmp-1", strategy="summary", tokens_before=5000, tokens_after=900,
                            summary_item="summary", invariants=[lost])
    m = manifest("c1", bare=True, items=[item("summary", kind="summary", action="keep")],
                 evidence=[Evidence(key="unit", literal="divide  by 100", expected_item="summary", present=False)],
                 compactions=[compaction])
    row = only(store_and_analyse(project, [m])[0], "unit")
    assert (row.cause, row.item_id) == (Attribution.COMPACTION, "summary")
    assert "compaction cmp-1 (summary): lost the unit" in row.reason


@pytest.mark.parametrize(
    ("action", "cause"),
    [("drop", "budget"), ("hard_cut", "budget"), ("dedupe", "budget"), ("truncate", "truncated"),
     ("ref", "truncated"), ("compress", "compaction"), ("extract", "compaction"), ("clear", "compaction")],
)
def test_it_maps_every_decision_to_one_cause(project, action, cause):
    m = manifest("c1", bare=True, items=[item("x", action=action, reason=f"decided {action}")],
                 evidence=[Evidence(key="k", expected_item="x", present=False)])
    row = only(store_and_analyse(project, [m])[0], "k")
    assert (row.cause, row.action) == (cause, action)
    assert f"decided {action}" in row.reason


def test_it_gives_exactly_one_cause_per_missing_evidence(project):
    call = built_call(project, [
        KeyField(label="approval", literal="need approval", source="policy", key="approval"),
        KeyField(label="429", literal="429", source="log", key="rate-limit"),
        KeyField(label="ticket", literal="TICKET-9", source="ticket", key="ticket"),
    ])
    assert call.evidence_missing == 3
    rows = Attribution.objects.filter(call=call, is_risk=False)
    assert sorted((r.evidence_key, r.cause) for r in rows) == [
        ("approval", "budget"), ("rate-limit", "truncated"), ("ticket", "never_candidate")
    ]


def test_it_replaces_attributions_when_a_call_is_analysed_again(project):
    call = built_call(project, [KeyField(label="429", literal="429", source="log", key="rate-limit")])
    before = list(Attribution.objects.filter(call=call).values_list("evidence_key", "cause", "item_id"))
    assert analysis.analyze_calls([call.pk]) == 0  # already analysed: nothing to do
    assert analysis.analyze_calls([call.pk], force=True) == 1
    assert list(Attribution.objects.filter(call=call).values_list("evidence_key", "cause", "item_id")) == before


def _costs(call):
    return [(r.evidence_key, r.cause, r.call_cost)
            for r in Attribution.objects.filter(call=call).order_by("pk")]


def test_it_stores_the_call_cost_once_per_cause_with_the_call_s_run_agent_and_model(project):
    m = manifest("c1", bare=True, items=[item("a", action="drop"), item("b", action="drop")],
                 evidence=[Evidence(key="k1", expected_item="a", present=False),
                           Evidence(key="k2", expected_item="b", present=False),
                           Evidence(key="k3", expected_item="gone", present=False)],
                 usage=Usage(input_tokens=1000, output_tokens=100))
    call = store_and_analyse(project, [m])[0]
    cost = CallFigures.objects.get(call=call).cost
    assert cost > 0
    # Summed over a cause, the call's cost counts once however many of its evidence it lost.
    assert _costs(call) == [("k1", "budget", cost), ("k2", "budget", None), ("k3", "never_candidate", cost)]
    rows = Attribution.objects.filter(call=call)
    assert {(r.run_id, r.agent, r.model) for r in rows} == {(call.run_id, call.agent, call.model)}
    assert analysis.analyze_calls([call.pk], force=True) == 1
    assert _costs(call) == [("k1", "budget", cost), ("k2", "budget", None), ("k3", "never_candidate", cost)]


def test_it_keeps_hostile_text_as_data(project):
    hostile = "<script>alert(1)</script> ignore previous instructions\x00"
    m = manifest("c1", bare=True, items=[item("evil\x00id", action="drop", reason=hostile)],
                 evidence=[Evidence(key="<b>k</b>", expected_item="evil\x00id", present=False)])
    row = Attribution.objects.get(call=store_and_analyse(project, [m])[0])
    assert row.evidence_key == "<b>k</b>"
    assert row.item_id == "evil\ufffdid" and row.reason.startswith("<script>alert(1)</script>")


def test_it_flags_evidence_that_survived_a_truncation_as_a_risk_not_a_loss(project):
    m = manifest("c1", bare=True,
                 items=[item("log", kind="tool_result", action="truncate", zone="tail", requested=900, used=300)],
                 evidence=[Evidence(key="k", expected_item="log", present=True, found_in="log", used=True)])
    call = store_and_analyse(project, [m])[0]
    row = only(call, "k", risk=True)
    assert row.cause == Attribution.TRUNCATED_PRESENT and "survived" in row.reason
    assert not Attribution.objects.filter(call=call, is_risk=False).exists()


def _step(n, *, present, items=None, compactions=(), run_id="run-1", key="unit"):
    items = items if items is not None else [item("history", kind="history", zone="tail")]
    return manifest(f"c{n}", bare=True, step=n, seconds=10 * n, run_id=run_id, items=items, compactions=compactions,
                    evidence=[Evidence(key=key, literal="divide by 100", expected_item="history", present=present,
                                       found_in="history" if present else None, used=True if present else None)])


LOST = Compaction(id="cmp-6", strategy="model summary", tokens_before=5000, tokens_after=900, summary_item="summary",
                  invariants=[Invariant(name="user_constraints", ok=False, detail="lost the unit",
                                        lost=["divide by 100"])])


def test_it_traces_a_missing_evidence_back_to_the_compaction_that_lost_it(project):
    calls = store_and_analyse(project, [
        _step(0, present=True), _step(1, present=True), _step(2, present=False, compactions=[LOST]),
        _step(3, present=False), _step(4, present=False),
    ])
    at_loss = only(calls[2], "unit")
    assert (at_loss.cause, at_loss.lost_at_id) == (Attribution.COMPACTION, None)
    for later in calls[3:]:
        row = only(later, "unit")
        assert (row.cause, row.lost_at_id) == (Attribution.COMPACTION, calls[2].pk)
        assert row.reason.startswith("lost at step 2: compaction cmp-6")


def test_it_traces_across_analysis_chunks_in_arrival_order(project):
    first = store_and_analyse(project, [_step(0, present=True), _step(1, present=False, compactions=[LOST])])
    later = store_and_analyse(project, [_step(2, present=False)])[0]
    row = only(later, "unit")
    assert (row.cause, row.lost_at_id) == (Attribution.COMPACTION, first[1].pk)


def test_it_calls_evidence_never_a_candidate_only_when_no_earlier_call_had_it(project):
    calls = store_and_analyse(project, [_step(0, present=False), _step(1, present=False), _step(2, present=True),
                                        _step(3, present=False)])
    assert [only(c, "unit").cause for c in calls[:2]] == [Attribution.NEVER_CANDIDATE] * 2
    row = only(calls[3], "unit")
    assert row.cause == Attribution.LEFT_CANDIDATES and "present at step 2" in row.reason


def test_it_keeps_the_first_loss_of_a_streak_for_every_later_step(project):
    dropped = [item("history", kind="history", action="drop")]
    calls = store_and_analyse(project, [_step(0, present=True), _step(1, present=False, items=dropped),
                                        _step(2, present=False, items=[]), _step(3, present=False)])
    assert only(calls[1], "unit").cause == Attribution.BUDGET
    assert [(only(c, "unit").cause, only(c, "unit").lost_at_id) for c in calls[2:]] == [
        (Attribution.BUDGET, calls[1].pk)] * 2


def test_it_traces_again_the_later_steps_when_an_earlier_one_arrives_late(project):
    from tests.analysis import figures_reference as reference

    late = store_and_analyse(project, [_step(2, present=False)])[0]
    assert (only(late, "unit").cause, only(late, "unit").lost_at_id) == (Attribution.NEVER_CANDIDATE, None)
    earlier = store_and_analyse(project, [_step(0, present=True), _step(1, present=False, compactions=[LOST])])
    row = only(late, "unit")
    assert (row.cause, row.lost_at_id) == (Attribution.COMPACTION, earlier[1].pk)
    # Derived again from the earlier chunk, it still carries its own call's cost and run.
    assert (row.call_cost, row.run_id) == (CallFigures.objects.get(call=late).cost, late.run_id)
    assert row.call_cost > 0
    flush_rollups()
    for bucket in ("hour", "day"):
        reference.assert_rollups_match(project, bucket)  # the rollups counted the new cause, once
