"""Compaction review: r, d, lost fields, and the per-project list of failures."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ctxkit.context.compaction import Record, Summary, compact
from ctxkit.manifest import Compaction, Invariant
from manifests.models import CompactionFigures
from manifests.selectors import compactions as compaction_sel
from manifests.selectors.filters import Filters
from tests.analysis.support import item
from tests.support import T0, manifest, store_and_analyse

pytestmark = pytest.mark.django_db

HISTORY = [
    Record(id="m1", role="user", text="Only touch the test environment. Order 4417 refund 12.50 EUR.", turn=1),
    Record(id="m2", role="assistant", text="Started operation op-981 (refund 4417), pending approval.", turn=1),
    Record(id="m3", role="user", text="Also check order 5120.", turn=2),
    Record(id="m4", role="assistant", text="Checking 5120.", turn=2),
]


def test_it_reviews_a_ctxkit_compaction_that_lost_a_constraint(project):
    # A summarizer that keeps the order ids but drops the hard constraint.
    result = compact(HISTORY, keep_last=1, summarizer=lambda rs: Summary(facts=["order 4417 refund", "op-981"]),
                     constraints=["Only touch the test environment"], active_operations=["op-981"],
                     required_evidence=["12.50 EUR"])
    m = manifest("c1", bare=True, items=[item(result.summary.id, kind="summary", tokens=30)],
                 compactions=[result.to_manifest()])
    call = store_and_analyse(project, [m])[0]
    review = CompactionFigures.objects.get(call=call)
    assert review.compaction.event_id == result.compaction_id
    assert review.ratio_r == pytest.approx(result.tokens_after / result.tokens_before)
    assert review.checked == 4 and review.failed
    assert sorted(review.failed_names) == ["required_evidence", "user_constraints"]
    assert review.distortion_d == pytest.approx(2 / 4)
    assert review.lost_fields == ["Only touch the test environment", "12.50 EUR"]
    assert review.started_at == call.started_at and review.project_id == project.pk


def test_it_reviews_a_clean_compaction(project):
    checks = [Invariant(name="user_constraints", ok=True), Invariant(name="required_evidence", ok=True)]
    comp = Compaction(id="cmp-ok", strategy="extractive", tokens_before=4000, tokens_after=1000, invariants=checks)
    call = store_and_analyse(project, [manifest("c1", bare=True, items=[item("a")], compactions=[comp])])[0]
    review = CompactionFigures.objects.get(call=call)
    assert (review.ratio_r, review.distortion_d, review.failed, review.lost_fields) == (0.25, 0.0, False, [])


def test_it_leaves_d_empty_when_nothing_was_checked(project):
    comp = Compaction(id="cmp-0", strategy="summary", tokens_before=0, tokens_after=0)
    call = store_and_analyse(project, [manifest("c1", bare=True, items=[item("a")], compactions=[comp])])[0]
    review = CompactionFigures.objects.get(call=call)
    assert review.ratio_r is None and review.distortion_d is None and review.checked == 0


def test_it_lists_the_failures_of_a_project_newest_first(project, other_project):
    bad = Compaction(id="cmp-bad", strategy="summary", tokens_before=5000, tokens_after=800,
                     invariants=[Invariant(name="pending_obligations", ok=False, lost=["reply by Friday 18:00"])])
    good = Compaction(id="cmp-good", strategy="summary", tokens_before=5000, tokens_after=800,
                      invariants=[Invariant(name="pending_obligations", ok=True)])
    store_and_analyse(project, [
        manifest("old", bare=True, items=[item("a")], compactions=[bad], started_at=T0),
        manifest("new", bare=True, items=[item("a")], compactions=[bad], started_at=T0 + timedelta(hours=1)),
        manifest("fine", bare=True, items=[item("a")], compactions=[good], started_at=T0 + timedelta(hours=2)),
    ])
    store_and_analyse(other_project, [manifest("theirs", bare=True, items=[item("a")], compactions=[bad])])
    failures = list(compaction_sel.events(project, Filters(), only_failed=True).object_list)
    assert [(c.call.call_id, c.event_id) for c in failures] == [("new", "cmp-bad"), ("old", "cmp-bad")]
    assert failures[0].figures.lost_fields == ["reply by Friday 18:00"]
    later = compaction_sel.events(project, Filters(since=T0 + timedelta(minutes=30)), only_failed=True)
    assert [c.call.call_id for c in later.object_list] == ["new"]
