"""Summaries in the conversation's language, sections not by one keyword, the caller's token counts
(the three-section summary; the caller's token estimator)."""

from __future__ import annotations

from ctxkit import Record, extractive_summarizer, project
from ctxkit.context.grouping import MESSAGE_OVERHEAD, message_tokens
from ctxkit.context.handoff import check_handoff


def test_chinese_conversation_gets_chinese_headings() -> None:
    """已定结论 / 待办事项 / 硬约束, empty sections written as 无."""
    summary = extractive_summarizer([Record("u1", "user", "订单 DD-5531 的退款金额是 328 元。")])
    text = summary.render()
    assert text.splitlines() == ["已定结论：", "- 订单 DD-5531 的退款金额是 328 元。 [src: u1]", "待办事项：", "- 无",
                                 "硬约束：", "- 无"]
    assert check_handoff(text).ok


def test_english_conversation_keeps_english_headings() -> None:
    """The same three sections, in the conversation's language."""
    text = extractive_summarizer([Record("u1", "user", "Order ORD-1 was refunded 59 USD.")]).render()
    assert text.startswith("Settled facts:") and "Hard constraints:\n- none" in text


def test_sections_do_not_rest_on_one_keyword() -> None:
    """Hard requirements and open items by what the sentence says, not by 之前 / 等待 alone."""
    records = [
        Record("u1", "user", "之前查过 app 渠道 3 次。"),  # "earlier": a fact, not a deadline
        Record("u2", "user", "审批等待了 40 分钟。"),  # "waited": a fact, not an open item
        Record("u3", "user", "请在周五 18:00 之前答复。"),  # a deadline: a hard constraint
        Record("u4", "user", "还在等待财务审批结果。"),  # something awaited: an open item
    ]
    s = extractive_summarizer(records)
    assert [f.split(" [src")[0] for f in s.facts] == ["之前查过 app 渠道 3 次。", "审批等待了 40 分钟。"]
    assert [c.split(" [src")[0] for c in s.constraints] == ["请在周五 18:00 之前答复。"]
    assert [o.split(" [src")[0] for o in s.open_items] == ["还在等待财务审批结果。"]


def test_project_uses_the_callers_token_counts() -> None:
    """EstimateTokens is the caller's; no 4 tokens per message silently added on top."""
    history = [{"role": "user", "content": "abcd"}, {"role": "assistant", "content": "efgh"}]
    p = project(history, window=8, estimate=len)
    assert p.used_tokens == 8 and p.overflow_tokens == 0
    assert message_tokens({"role": "user", "content": "x", "tokens": 42}) == 42  # a given count is verbatim
    assert message_tokens({"role": "user", "content": "abcd"}) == 1 + MESSAGE_OVERHEAD  # ctxkit's own estimate
    assert project(history, window=8, estimate=len, overhead=2).used_tokens == 12
