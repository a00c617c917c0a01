"""The three-section handoff contract."""

from __future__ import annotations

import pytest

from ctxkit.context.compaction import Record, compact
from ctxkit.context.handoff import check_handoff, has_source, validate_handoff

GOOD_EN = """\
# Handoff
Settled facts:
- Order ORD-1234 was delivered on day 3 [src: orders/api#L40]
- The refund rule is in docs/policy.md:12
Open items:
- Refund not issued: no permission to call refund()
Hard constraints:
- none
"""

GOOD_ZH = """\
## 已定结论
1. 订单 ORD-9 已发货（来源：orders/api.py:12）
2. 退款记录见 https://example.com/refunds/9
**待办事项**
- 等财务确认
**硬约束**：无
"""


def test_a_complete_english_handoff_passes() -> None:
    report = check_handoff(GOOD_EN)
    assert report.ok, report.problems
    assert report.sections["facts"][0].startswith("Order ORD-1234")
    assert report.sections["constraints"] == ["none"]


def test_a_complete_chinese_handoff_passes_with_constraints_written_as_wu() -> None:
    report = check_handoff(GOOD_ZH)
    assert report.ok, report.problems
    assert report.sections["constraints"] == ["无"]
    assert report.sections["open_items"] == ["等财务确认"]
    assert len(report.sections["facts"]) == 2


def test_missing_sections_are_named() -> None:
    report = check_handoff("Settled facts:\n- ORD-1 shipped [src: t1]\n")
    assert not report.ok
    assert report.problems == [
        "missing section: open items (待办事项)",
        "missing section: hard constraints (硬约束)",
    ]


def test_a_settled_fact_without_a_source_is_reported() -> None:
    text = (
        "Settled facts:\n- ORD-1 shipped [src: t1]\n- The customer is happy\nOpen items:\n- none\nConstraints:\n- none"
    )
    report = check_handoff(text)
    assert report.facts_without_source == ["The customer is happy"]
    assert report.problems == [
        "settled fact 2 has no source identifier (file path, id, URL or [src: ...]): 'The customer is happy'"
    ]


def test_an_empty_constraints_section_must_say_none() -> None:
    text = "Settled facts:\n- none\nOpen items:\n- none\nHard constraints:\n"
    report = check_handoff(text)
    assert report.problems == ["the hard constraints section is empty: write 'none' (无) if there are no constraints"]
    assert check_handoff(text + "none\n").ok


def test_process_narrative_outside_the_sections_is_reported() -> None:
    text = "I searched 40 files and tried many things.\n" + GOOD_EN
    report = check_handoff(text)
    assert len(report.problems) == 1
    assert "outside the three sections" in report.problems[0]
    assert "I searched 40 files" in report.problems[0]


def test_a_section_given_twice_is_reported() -> None:
    report = check_handoff(GOOD_EN + "Open items:\n- one more\n")
    assert report.problems == ["section open items (待办事项) appears more than once"]
    assert report.sections["open_items"] == ["Refund not issued: no permission to call refund()", "one more"]


@pytest.mark.parametrize(
    "fact",
    [
        "shipped [src: t1]",
        "shipped (source: ticket 4)",
        "shipped, ref=artifact://x",
        "see https://example.com/a",
        "bug at app/views.py:120",
        "bug in src/app/views",
        "order ORD-1234 shipped",
        "fixed in PR #17",
        "fixed in commit 3f2b8c1e",
        "订单状态已更新，来源：工单系统",
    ],
)
def test_source_identifiers_in_their_usual_forms_are_accepted(fact: str) -> None:
    assert has_source(fact)


@pytest.mark.parametrize("fact", ["the customer is happy", "email/phone both fine", "decade of data", "客户很满意"])
def test_plain_claims_have_no_source(fact: str) -> None:
    assert not has_source(fact)


def test_validate_handoff_returns_the_text_or_raises_with_every_problem() -> None:
    assert validate_handoff(GOOD_EN) == GOOD_EN
    with pytest.raises(ValueError) as info:
        validate_handoff("Settled facts:\n- it works\n")
    message = str(info.value)
    assert "missing section: open items" in message
    assert "missing section: hard constraints" in message
    assert "settled fact 1 has no source identifier" in message


def test_a_compaction_summary_meets_the_handoff_contract() -> None:
    history = [
        Record("u1", "user", "Order ORD-55 was charged twice."),
        Record("a1", "assistant", "TODO: ask finance about ORD-55."),
        Record("u2", "user", "ok"),
    ]
    result = compact(history, keep_last=1, estimate=len)
    assert check_handoff(result.summary.text).ok
