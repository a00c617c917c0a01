"""Compaction with survival checks, and clearing of old tool results."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import msgspec
import pytest

from ctxkit.context.compaction import (
    Record,
    Summary,
    clear_tool_results,
    compact,
    extractive_summarizer,
    should_compact,
)
from ctxkit.context.handoff import check_handoff
from ctxkit.context.tokens import estimate_tokens
from ctxkit.manifest import MAX_NAME, Compaction, ContextEdit, convert_manifest


def chars(text: str) -> int:
    """A deterministic estimator for exact arithmetic in tests: one token per character."""
    return len(text)


def support_history() -> list[Record]:
    """Four turns of a refund conversation; the deadline lives only in the last turns."""
    return [
        Record("u1", "user", "Hi, my order ORD-1234 arrived broken."),
        Record("a1", "assistant", "Sorry to hear that. Let me look it up."),
        Record(
            "t1", "tool", '{"order_id": "ORD-1234", "amount": "59.00 USD", "status": "delivered"}', tool_name="orders"
        ),
        Record("a2", "assistant", "Lookup failed first with error E1001, the retry worked."),
        Record("u2", "user", "You must not refund to a different card. I like your shop a lot."),
        Record("a3", "assistant", "TODO: confirm the refund with finance, operation op-77 is open."),
        Record("u3", "user", "Please get back to me by Friday evening."),
        Record("a4", "assistant", "Understood."),
        Record("u4", "user", "Any news?"),
        Record("a5", "assistant", "Still waiting on finance."),
    ]


# --------------------------------------------------------------------------- #
# Trigger


def test_should_compact_triggers_on_window_occupancy() -> None:
    assert should_compact(80_000, 100_000) is True
    assert should_compact(79_999, 100_000) is False
    assert should_compact(85_000, 100_000, threshold=0.9) is False
    assert should_compact(90_000, 100_000, threshold=0.9) is True


def test_should_compact_rejects_a_nonpositive_window_or_bad_threshold() -> None:
    with pytest.raises(ValueError):
        should_compact(10, 0)
    with pytest.raises(ValueError):
        should_compact(10, 100, threshold=0)


# --------------------------------------------------------------------------- #
# Folding


def test_compact_keeps_the_last_turns_verbatim_and_appends_a_summary() -> None:
    history = support_history()
    result = compact(history, keep_last=2, estimate=chars)
    assert result.performed
    sent = result.model_records()
    assert sent[0] is result.summary
    assert result.summary.kind == "summary"
    # The last two turns (u3+a4, u4+a5) are the very same record objects, untouched.
    assert sent[1:] == history[6:]
    assert all(a is b for a, b in zip(sent[1:], history[6:], strict=True))
    assert result.kept_turns == 2
    assert result.folded_ids == ["u1", "a1", "t1", "a2", "u2", "a3"]


def test_compact_never_rewrites_history() -> None:
    history = support_history()
    snapshot = copy.deepcopy(history)
    ids = [id(r) for r in history]
    result = compact(history, keep_last=1, estimate=chars)
    assert history == snapshot
    assert [id(r) for r in history] == ids
    assert all(r.compacted_by is None for r in history)
    # The new history holds every old record, the folded ones marked by reference.
    folded = [r for r in result.new_history if r.compacted_by is not None]
    assert [r.id for r in folded] == result.folded_ids
    assert all(r.compacted_by == result.summary.id for r in folded)
    assert [r.text for r in folded] == [r.text for r in history if r.id in result.folded_ids]
    order = [r.id for r in result.new_history]
    assert order == [r.id for r in history[:8]] + [result.summary.id] + ["u4", "a5"]


def test_extractive_summary_has_three_sections_and_keeps_identifiers_verbatim() -> None:
    summary = extractive_summarizer(support_history()[:6])
    facts = "\n".join(summary.facts)
    assert "ORD-1234" in facts and "59.00 USD" in facts and "E1001" in facts
    assert summary.open_items == ["TODO: confirm the refund with finance, operation op-77 is open. [src: a3]"]
    assert summary.constraints == ["You must not refund to a different card. [src: u2]"]
    everything = summary.render()
    assert "I like your shop a lot" not in everything  # no identifier, number or rule: dropped
    assert "Sorry to hear that" not in everything
    assert everything.index("Settled facts:") < everything.index("Open items:") < everything.index("Hard constraints:")


def test_extractive_summary_passes_the_handoff_check() -> None:
    result = compact(support_history(), keep_last=2, estimate=chars)
    report = check_handoff(result.summary.text)
    assert report.ok, report.problems


def test_empty_sections_are_written_as_none() -> None:
    text = Summary(facts=["ORD-1 shipped [src: r1]"]).render()
    assert text == "Settled facts:\n- ORD-1 shipped [src: r1]\nOpen items:\n- none\nHard constraints:\n- none"


# --------------------------------------------------------------------------- #
# Invariants


def test_all_invariants_hold_when_everything_survives() -> None:
    result = compact(
        support_history(),
        keep_last=2,
        constraints=["You must not refund to a different card.", "Please get back to me by Friday evening."],
        obligations=["confirm the refund with finance"],
        active_operations=["op-77"],
        required_evidence=["ORD-1234", "59.00 USD", "E1001"],
        estimate=chars,
    )
    assert result.ok
    assert [inv.name for inv in result.invariants] == [
        "pending_obligations",
        "active_operations",
        "user_constraints",
        "required_evidence",
    ]
    assert all(inv.ok and not inv.lost for inv in result.invariants)
    assert result.distortion == 0.0


def test_a_lossy_summarizer_fails_the_invariants_with_the_literal_items_lost() -> None:
    def vague(records: object) -> str:
        return "Settled facts:\n- The customer had an issue with the relevant order.\nOpen items:\n- none"

    result = compact(
        support_history(),
        keep_last=1,
        summarizer=vague,
        constraints=["You must not refund to a different card."],
        obligations=["confirm the refund with finance"],
        active_operations=["op-77"],
        required_evidence=["ORD-1234", "Still waiting on finance."],
        estimate=chars,
    )
    assert not result.ok
    lost = {inv.name: inv.lost for inv in result.failed}
    assert lost == {
        "pending_obligations": ["confirm the refund with finance"],
        "active_operations": ["op-77"],
        "user_constraints": ["You must not refund to a different card."],
        "required_evidence": ["ORD-1234"],  # the other one is in the kept turn
    }
    assert result.distortion == pytest.approx(4 / 5)
    assert result.strategy == "vague"
    manifest = result.to_manifest()
    by_name = {inv.name: inv for inv in manifest.invariants}
    assert by_name["required_evidence"].ok is False
    assert by_name["required_evidence"].lost == ["ORD-1234"]
    assert by_name["required_evidence"].detail == "1 of 2 missing after compaction"


def test_a_soft_deadline_in_recent_turns_is_lost_when_too_few_turns_are_kept() -> None:
    # Keeping 1 turn instead of 6 raises the ratio but loses "reply by Friday",
    # which does not look like a conclusion, so the summarizer does not pick it up.
    deadline = "Please get back to me by Friday evening."
    kept_enough = compact(support_history(), keep_last=3, constraints=[deadline], estimate=chars)
    kept_one = compact(support_history(), keep_last=1, constraints=[deadline], estimate=chars)
    assert kept_enough.ok
    assert not kept_one.ok
    assert kept_one.failed[0].name == "user_constraints"
    assert kept_one.failed[0].lost == [deadline]
    assert kept_one.saved_ratio > kept_enough.saved_ratio


def test_items_missing_before_compaction_fail_but_do_not_count_as_distortion() -> None:
    result = compact(support_history(), keep_last=2, required_evidence=["ORD-1234", "INV-999"], estimate=chars)
    (failed,) = result.failed
    assert failed.lost == ["INV-999"]
    assert failed.absent_before == ["INV-999"]
    assert "already missing before it" in failed.detail
    assert result.distortion == 0.0


def test_text_outside_the_history_counts_for_survival() -> None:
    rule = "Only refunds to the original card."
    history = [Record("u1", "user", "hello there"), Record("a1", "assistant", "hi"), Record("u2", "user", "ok")]
    without = compact(history, keep_last=1, constraints=[rule], estimate=chars)
    with_system = compact(history, keep_last=1, constraints=[rule], elsewhere=f"System: {rule}", estimate=chars)
    assert not without.ok
    assert with_system.ok


def test_ratio_and_token_counts_use_the_estimator() -> None:
    chatter = "Thanks so much, that is really kind of you and I appreciate the quick help with all of this. " * 5
    history = [Record("u0", "user", chatter), Record("a0", "assistant", chatter), *support_history()]
    result = compact(history, keep_last=2, estimate=chars)
    assert result.tokens_before == sum(len(r.text) for r in history)
    assert result.tokens_after == sum(len(r.text) for r in result.model_records())
    assert result.tokens_after < result.tokens_before
    assert result.saved_ratio == pytest.approx(1 - result.tokens_after / result.tokens_before)
    assert result.kept_ratio == pytest.approx(1 - result.saved_ratio)


def test_the_default_estimator_is_ctxkit_tokens() -> None:
    history = support_history()
    result = compact(history, keep_last=2)
    assert result.tokens_before == sum(estimate_tokens(r.text) for r in history)


def test_pinned_and_system_records_are_never_folded() -> None:
    history = [
        Record("s", "system", "Rules v3."),
        Record("u1", "user", "order ORD-1"),
        Record("p", "assistant", "Plan: 1. look up 2. refund", pinned=True),
        Record("a1", "assistant", "looked up 42"),
        Record("u2", "user", "and now?"),
    ]
    result = compact(history, keep_last=1, estimate=chars)
    assert result.folded_ids == ["u1", "a1"]
    assert [r.id for r in result.model_records()] == ["s", "p", result.summary.id, "u2"]


def test_explicit_turn_numbers_group_records_into_turns() -> None:
    history = [
        Record("a", "assistant", "step 1 done", turn=1),
        Record("b", "tool", "result 1", turn=1),
        Record("c", "assistant", "step 2 done", turn=2),
        Record("d", "tool", "result 2", turn=2),
    ]
    result = compact(history, keep_last=1, estimate=chars)
    assert result.folded_ids == ["a", "b"]
    assert [r.id for r in result.model_records()][1:] == ["c", "d"]


def test_a_second_compaction_folds_the_first_summary() -> None:
    first = compact(support_history(), keep_last=3, estimate=chars)
    more = [*first.new_history, Record("u5", "user", "Refund ref RF-5 arrived?"), Record("a6", "assistant", "Yes.")]
    second = compact(more, keep_last=1, estimate=chars)
    assert first.summary.id in second.folded_ids
    by_id = {r.id: r for r in second.new_history}
    assert by_id["u1"].compacted_by == first.summary.id  # earlier marks are kept
    assert by_id[first.summary.id].compacted_by == second.summary.id
    assert "ORD-1234" in second.summary.text  # carried over from the first summary
    assert [r.id for r in second.model_records()] == [second.summary.id, "u5", "a6"]


def test_nothing_to_fold_is_a_noop_that_cannot_be_recorded() -> None:
    history = support_history()
    result = compact(history, keep_last=10, estimate=chars)
    assert not result.performed
    assert result.summary is None
    assert result.new_history == history
    assert result.tokens_after == result.tokens_before
    with pytest.raises(ValueError):
        result.to_manifest()


def test_compaction_manifest_validates_inside_a_manifest() -> None:
    result = compact(
        support_history(),
        keep_last=2,
        required_evidence=["ORD-1234"],
        trigger="occupancy 0.83 >= 0.8",
        estimate=chars,
    )
    event = result.to_manifest()
    assert isinstance(event, Compaction)
    assert event.tokens_before == result.tokens_before
    assert event.tokens_after == result.tokens_after
    assert event.kept_turns == 2
    assert event.summary_item == result.summary.id
    assert event.trigger == "occupancy 0.83 >= 0.8"
    assert event.strategy == "extractive"
    body = {
        "schema": "ctxview.manifest/v1",
        "call_id": "c1",
        "run_id": "r1",
        "step": 3,
        "model": "m",
        "started_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "budget": {"window": 200_000},
        "compactions": [msgspec.to_builtins(event)],
    }
    manifest, errors = convert_manifest(body)
    assert errors == []
    assert manifest.compactions[0].invariants[3].name == "required_evidence"


def test_lost_literals_are_cut_to_the_manifest_limits() -> None:
    long_literal = "X" * (MAX_NAME + 50)
    result = compact(support_history(), keep_last=1, required_evidence=[long_literal], estimate=chars)
    assert result.failed[0].lost == [long_literal]  # the result keeps the full literal
    assert result.to_manifest().invariants[3].lost == ["X" * MAX_NAME]


def test_negative_keep_last_is_refused() -> None:
    with pytest.raises(ValueError):
        compact(support_history(), keep_last=-1, estimate=chars)


# --------------------------------------------------------------------------- #
# Clearing old tool results


def tool_history() -> list[Record]:
    return [
        Record("u1", "user", "look up three orders"),
        Record("t1", "tool", "A" * 400, tool_name="orders", ref="artifact://t1"),
        Record("t2", "tool", "B" * 300, tool_name="orders"),
        Record("t3", "tool", "C" * 200, tool_name="memory"),
        Record("t4", "tool", "D" * 100, tool_name="orders"),
        Record("a1", "assistant", "done"),
    ]


def test_clear_replaces_old_tool_results_with_a_placeholder_and_keeps_the_last_k() -> None:
    records = tool_history()
    result = clear_tool_results(records, keep_last=2, clear_at_least=0, estimate=chars)
    assert result.applied
    assert result.cleared_ids == ["t1", "t2"]
    by_id = {r.id: r for r in result.records}
    assert by_id["t1"].text == "[cleared tool result: ref=artifact://t1, 400 tokens]"
    assert by_id["t2"].text == "[cleared tool result: ref=t2, 300 tokens]"
    assert by_id["t1"].cleared and by_id["t2"].cleared
    assert by_id["t3"].text == "C" * 200 and by_id["t4"].text == "D" * 100
    freed = (400 - len(by_id["t1"].text)) + (300 - len(by_id["t2"].text))
    assert result.cleared_tokens == freed
    assert result.kept == 2


def test_clear_is_a_noop_below_clear_at_least() -> None:
    records = tool_history()
    would_free = clear_tool_results(records, keep_last=2, estimate=chars).cleared_tokens
    result = clear_tool_results(records, keep_last=2, clear_at_least=would_free + 1, estimate=chars)
    assert not result.applied
    assert result.cleared_ids == [] and result.cleared_tokens == 0
    assert result.records == records
    assert all(a is b for a, b in zip(result.records, records, strict=True))
    assert "clear_at_least" in result.reason
    with pytest.raises(ValueError):
        result.to_manifest()
    exactly = clear_tool_results(records, keep_last=2, clear_at_least=would_free, estimate=chars)
    assert exactly.applied


def test_clear_does_not_change_the_callers_records() -> None:
    records = tool_history()
    snapshot = copy.deepcopy(records)
    clear_tool_results(records, keep_last=0, estimate=chars)
    assert records == snapshot


def test_clear_skips_excluded_tools_small_results_and_already_cleared_ones() -> None:
    records = [*tool_history(), Record("t5", "tool", "tiny", tool_name="orders"), Record("u2", "user", "x")]
    first = clear_tool_results(records, keep_last=0, exclude_tools=["memory"], estimate=chars)
    assert first.cleared_ids == ["t1", "t2", "t4"]  # memory excluded; "tiny" is smaller than a placeholder
    again = clear_tool_results(first.records, keep_last=0, exclude_tools=["memory"], estimate=chars)
    assert not again.applied
    assert again.reason == "nothing to clear"


def test_clear_to_manifest_is_a_clear_tool_uses_context_edit() -> None:
    result = clear_tool_results(tool_history(), keep_last=1, estimate=chars)
    edit = result.to_manifest()
    assert isinstance(edit, ContextEdit)
    assert edit.type == "clear_tool_uses"
    assert edit.cleared_count == 3
    assert edit.cleared_tokens == result.cleared_tokens
    assert edit.kept == 1
    assert edit.item_ids == ["t1", "t2", "t3"]


def test_a_cleared_placeholder_is_not_summarised_again() -> None:
    cleared = clear_tool_results(tool_history(), keep_last=0, estimate=chars).records
    summary = extractive_summarizer(cleared)
    assert not any("cleared tool result" in line for line in summary.facts + summary.open_items)


# --------------------------------------------------------------------------- #
# Pending work in the folded turns


SUBMITTED = "已为您提交退款申请，财务审批通过后原路退回到您的支付账户。"
PROMISE = "审批结果出来后，我会在周五 18:00 前给您回话。"


def refund_in_progress() -> list[Record]:
    """The material's refund conversation (a broken cup, order DD20241107-5531, 328.00 元 under
    return policy 7.2), up to a submitted refund awaiting finance's approval and the agent's
    promise to report back, then a turn of small talk."""
    turns = [
        ("我的订单 DD20241107-5531 收到的时候外包装已经破了，里面的杯子也碎了",
         "您好，非常抱歉，我先帮您查一下这个订单"),
        ("查到了吗？", "查到了，退款金额 328.00 元，根据退货政策第 7.2 条可以全额退款"),
        ("那就退吧", SUBMITTED + PROMISE),
        ("好的，谢谢", "不客气"),
    ]
    records: list[Record] = []
    for n, (user, assistant) in enumerate(turns):
        records += [Record(f"u{n}", "user", user, turn=n), Record(f"a{n}", "assistant", assistant, turn=n)]
    return records


def test_a_submitted_request_and_a_promise_to_follow_up_are_open_items() -> None:
    result = compact(refund_in_progress(), keep_last=1, obligations=[PROMISE], active_operations=[SUBMITTED])
    summary = extractive_summarizer([r for r in refund_in_progress() if r.turn != 3])
    assert [item.split(" [src")[0] for item in summary.open_items] == [SUBMITTED, PROMISE]
    assert summary.constraints == []  # a promise with a deadline is work to do, not a rule
    assert result.summary is not None
    text = result.summary.text
    assert text.index("待办事项：") < text.index(PROMISE) < text.index("硬约束：")
    assert "硬约束：\n- 无" in text
    assert result.ok


def test_english_pending_work_is_filed_under_open_items_and_rules_stay_constraints() -> None:
    records = [
        Record("a1", "assistant", "I submitted the refund request for ORD-1234."),
        Record("a2", "assistant", "I will get back to you once finance approves it."),
        Record("u1", "user", "Refunds are allowed only after approval."),
        Record("a3", "assistant", "The request for ORD-1200 was submitted and approved."),
    ]
    s = extractive_summarizer(records)
    assert [o.split(" [src")[0] for o in s.open_items] == ["I submitted the refund request for ORD-1234.",
                                                          "I will get back to you once finance approves it."]
    assert [c.split(" [src")[0] for c in s.constraints] == ["Refunds are allowed only after approval."]
    assert [f.split(" [src")[0] for f in s.facts] == ["The request for ORD-1200 was submitted and approved."]


def test_a_pending_obligation_filed_as_a_constraint_fails_its_invariant() -> None:
    """Present in the summary is not enough: under hard constraints a promise reads as a rule."""

    def as_constraint(records: object) -> Summary:
        return Summary(facts=["退款金额 328.00 元"], constraints=[PROMISE], language="zh")

    result = compact(refund_in_progress(), keep_last=1, summarizer=as_constraint, obligations=[PROMISE])
    failed = {inv.name: inv for inv in result.failed}
    assert list(failed) == ["pending_obligations"]
    assert failed["pending_obligations"].lost == [PROMISE] == failed["pending_obligations"].misfiled
    assert "filed in the summary, but not under open items" in result.to_manifest().invariants[0].detail
    # The default summarizer files it where it belongs.
    assert compact(refund_in_progress(), keep_last=1, obligations=[PROMISE]).ok
