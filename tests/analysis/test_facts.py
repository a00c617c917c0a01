"""Watched facts in the analysis: a fact seen earlier in a run and absent now is missing
evidence with its cause traced like any other, and a compaction that lost one fails its
required_evidence invariant. Runs go through the real ingest API."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from manifests import facts
from manifests.models import Attribution, Call, Compaction, CompactionFigures, Evidence, Invariant, Rollup
from tests.analysis.facts_support import FACT, compacted_run, send, step, text_item, watch
from tests.analysis.support import flush_rollups

pytestmark = pytest.mark.django_db

def test_it_traces_a_fact_lost_in_a_compaction_and_fails_its_invariant(project, api,
                                                                      django_capture_on_commit_callbacks):
    watch(project)
    calls = send(api, django_capture_on_commit_callbacks, compacted_run())
    rows = {c.step: list(Evidence.objects.filter(call=c, watched=True)) for c in calls}
    assert [(e.key, e.present, e.found_in) for e in rows[0]] == [("fact:deploy-target", True, "turn-1")]
    assert [(e.key, e.present) for e in rows[1]] == [("fact:deploy-target", True)]
    assert [(e.key, e.label, e.literal, e.present) for e in rows[2]] == [
        ("fact:deploy-target", "deploy-target", FACT, False)]
    lost = Attribution.objects.get(call=calls[2], is_risk=False)
    assert (lost.evidence_key, lost.cause, lost.item_id) == ("fact:deploy-target", Attribution.COMPACTION, "summary-2")
    assert lost.evidence_id == rows[2][0].pk and "compaction cmp-2" in lost.reason
    assert not Attribution.objects.filter(call__in=calls[:2], is_risk=False).exists()
    assert (calls[2].evidence_count, calls[2].evidence_missing) == (1, 1)

    compaction = Compaction.objects.get(call=calls[2])
    assert compaction.failed_invariants == 1
    invariant = Invariant.objects.get(compaction=compaction)
    assert (invariant.name, invariant.ok, invariant.lost, invariant.watched) == (
        "required_evidence", False, ["deploy-target"], True)
    review = CompactionFigures.objects.get(compaction=compaction)
    assert review.failed and review.failed_names == ["required_evidence"] and review.lost_fields == ["deploy-target"]

    # The API shows the same rows, and the rollups count the loss and the failure.
    body = api.get(f"/api/v1/calls/{calls[2].call_id}").json()
    assert [(e["key"], e["present"]) for e in body["evidence"]] == [("fact:deploy-target", False)]
    assert [(i["name"], i["ok"], i["lost"]) for i in body["compactions"][0]["invariants"]] == [
        ("required_evidence", False, ["deploy-target"])]
    flush_rollups()  # with a broker the beat refreshes them; without one the analysis has
    hour = Rollup.objects.get(project=project, bucket=Rollup.HOUR)
    assert (hour.evidence_total, hour.evidence_present, hour.invariant_failures) == (3, 2, 1)
    assert hour.attributions.get("compaction") == 1


def test_it_attributes_a_fact_whose_item_the_budget_dropped_to_the_budget(project, api,
                                                                          django_capture_on_commit_callbacks):
    watch(project)
    notes = f"Release notes. Rule: {FACT}."
    calls = send(api, django_capture_on_commit_callbacks, [
        step(0, [text_item("notes", notes, kind="memory")], run_id="run-b"),
        step(1, [text_item("notes", notes, kind="memory", action="drop", reason="budget exhausted")], run_id="run-b"),
    ])
    lost = Attribution.objects.get(call=calls[1], is_risk=False)
    assert (lost.evidence_key, lost.cause, lost.item_id, lost.action) == (
        "fact:deploy-target", Attribution.BUDGET, "notes", "drop")
    assert "budget exhausted" in lost.reason
    assert not Invariant.objects.filter(watched=True).exists()


def test_it_requires_no_fact_the_run_never_held(project, api, django_capture_on_commit_callbacks):
    watch(project, label="never", text="this text appears nowhere")
    watch(project, label="other-agent", text="careful", agent="someone-else")
    calls = send(api, django_capture_on_commit_callbacks, compacted_run("run-n"))
    assert not Evidence.objects.filter(watched=True).exists()
    assert not Attribution.objects.filter(call__in=calls).exists()
    assert [c.evidence_missing for c in calls] == [0, 0, 0]
    assert Compaction.objects.get(call=calls[2]).failed_invariants == 0


def test_it_finds_a_fact_by_its_regular_expression(project, api, django_capture_on_commit_callbacks):
    watch(project, label="eu-target", text=r"staging-eu-\d+", is_regex=True)
    calls = send(api, django_capture_on_commit_callbacks, compacted_run("run-r"))
    rows = list(Evidence.objects.filter(watched=True).order_by("call__step"))
    assert [(e.present, e.literal) for e in rows] == [(True, None), (True, None), (False, None)]
    assert Attribution.objects.get(call=calls[2]).cause == Attribution.COMPACTION


def test_it_applies_a_fact_added_after_ingest_when_the_calls_are_analysed_again(project, api,
                                                                                django_capture_on_commit_callbacks):
    calls = send(api, django_capture_on_commit_callbacks, compacted_run("run-late"))
    assert not Evidence.objects.filter(watched=True).exists()
    watch(project)
    call_command("reanalyse_calls", "--project", project.slug)
    for _ in range(2):  # twice: the second run changes nothing
        assert Evidence.objects.filter(watched=True).count() == 3
        assert list(Attribution.objects.filter(is_risk=False).values_list("call_id", "cause")) == [
            (calls[2].pk, Attribution.COMPACTION)]
        assert Invariant.objects.filter(watched=True).count() == 1
        assert Compaction.objects.get(call=calls[2]).failed_invariants == 1
        assert Call.objects.get(pk=calls[2].pk).evidence_missing == 1
        flush_rollups()
        hour = Rollup.objects.get(project=project, bucket=Rollup.HOUR)
        assert (hour.evidence_total, hour.invariant_failures) == (3, 1)
        call_command("reanalyse_calls", "--project", project.slug)

    # A deleted fact leaves the calls as their manifests say once they are analysed again.
    facts.delete_fact(project=project, fact_id=project.watched_facts.get().pk)
    call_command("reanalyse_calls", "--project", project.slug)
    assert not Evidence.objects.filter(watched=True).exists() and not Invariant.objects.filter(watched=True).exists()
    assert Compaction.objects.get(call=calls[2]).failed_invariants == 0
    assert Call.objects.get(pk=calls[2].pk).evidence_missing == 0
    assert not Attribution.objects.exists()


def budget_run(run_id: str) -> list[dict]:
    notes = f"Release notes. Rule: {FACT}."
    return [
        step(0, [text_item("notes", notes, kind="memory")], run_id=run_id),
        step(1, [text_item("notes", notes, kind="memory", action="drop", reason="budget exhausted")], run_id=run_id),
        step(2, [text_item("turn-5", "User: ship it.")], run_id=run_id),
    ]


def test_it_traces_a_later_loss_back_to_the_call_that_lost_it_in_an_earlier_batch(project, api,
                                                                                  django_capture_on_commit_callbacks):
    watch(project)
    run = budget_run("run-t")
    for m in run:  # one request per call, as an agent sends them
        send(api, django_capture_on_commit_callbacks, [m])
    calls = list(Call.objects.filter(run__run_id="run-t").order_by("step"))
    assert all(c.quarantined_at is None for c in calls)
    at_2 = Attribution.objects.get(call=calls[2], is_risk=False)
    assert (at_2.cause, at_2.item_id, at_2.action, at_2.lost_at_id) == (Attribution.BUDGET, "notes", "drop",
                                                                         calls[1].pk)
    assert at_2.reason.startswith("lost at step 1: ")


def test_it_derives_the_later_calls_again_when_an_earlier_step_arrives_late(project, api,
                                                                            django_capture_on_commit_callbacks):
    watch(project)
    run = budget_run("run-l")
    send(api, django_capture_on_commit_callbacks, run[1:])
    assert not Evidence.objects.filter(watched=True).exists(), "nothing required before the run held the fact"
    send(api, django_capture_on_commit_callbacks, run[:1])
    calls = list(Call.objects.filter(run__run_id="run-l").order_by("step"))
    assert [c.evidence_missing for c in calls] == [0, 1, 1]
    assert [a.cause for a in Attribution.objects.filter(is_risk=False).order_by("call__step")] == [
        Attribution.BUDGET, Attribution.BUDGET]
