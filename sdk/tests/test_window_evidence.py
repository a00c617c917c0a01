"""Sliding window and failure hints."""

from __future__ import annotations

from ctxkit.context.operators import FAIL_HINTS, extract_lines, is_failure_line, sliding_window
from ctxkit.context.tokens import estimate_tokens


def _turns() -> list[str]:
    old = ["user: 查询 app 渠道退款率", "tool(bi_query): error=HTTP 429 Too Many Requests retry_after=20s",
           "assistant: 换算口径：金额除以 100 得到元"]
    new = [f"assistant: 第 {i} 轮继续核对各渠道明细，结果正常，没有新的发现，继续下一轮核对工作。" for i in range(12)]
    return old + new


def test_rolled_out_failure_evidence_survives_when_newest_turns_fill_the_budget() -> None:
    """The rolled-out part is summarized keeping failure reasons, not dropped."""
    turns = _turns()
    budget = estimate_tokens("\n".join(turns[3:]))  # the newest turns alone fill the whole budget
    out, record = sliding_window(turns, budget=budget)
    assert estimate_tokens(out) <= budget
    assert record.data["rolled_out"] >= 3
    assert "429" in out  # the failure reason of a rolled-out turn, not just a count
    assert "[rolled out" in out


def test_summary_reserve_comes_before_the_newest_turns() -> None:
    """The summary's own budget is reserved first, then the newest turns fill the rest."""
    turns = _turns()
    for budget in range(60, 400, 17):
        out, record = sliding_window(turns, budget=budget)
        assert estimate_tokens(out) <= budget
        if record.data["rolled_out"] and record.data["kept_turns"]:
            assert "429" in out, budget


def test_failure_hints_are_fixed() -> None:
    """FAIL_HINTS = ("failed", "error", "timeout", "429", "e_", "denied", "拒绝", "失败")."""
    assert FAIL_HINTS == ("failed", "error", "timeout", "429", "e_", "denied", "拒绝", "失败")
    assert is_failure_line("tool: error=HTTP 429")
    assert not is_failure_line("user: 我们下次聊聊限流策略")


def test_chat_about_rate_limiting_does_not_crowd_out_a_real_failure() -> None:
    """A chat line mentioning rate limiting is not failure evidence."""
    turns = ["user: 顺便说一下，我们团队在讨论限流和超时的设计", "tool(bi_query): failed with HTTP 429",
             *[f"assistant: 第 {i} 轮正常推进，没有问题需要报告，继续执行后面的查询步骤。" for i in range(10)]]
    budget = estimate_tokens("\n".join(turns[4:])) + 8
    out, _ = sliding_window(turns, budget=budget)
    assert "failed with HTTP 429" in out
    assert "讨论限流" not in out


def test_extraction_ranks_a_real_failure_over_talk_about_one() -> None:
    """Score_line's failure points go to failure facts, not to topics."""
    text = "我们聊聊限流的事\nstatus=failed code=429"
    out, _ = extract_lines(text, estimate_tokens("status=failed code=429") + 12)
    assert "code=429" in out
