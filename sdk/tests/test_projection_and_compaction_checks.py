"""The five checks of budgeted projection (whole interaction groups, newest first) and the five
acceptance checks of compaction with survival checks."""

from __future__ import annotations

from typing import Any

from ctxkit import Record, compact, group_interactions, project, should_compact
from ctxkit.context.summary import conversation_language
from ctxkit.context.tokens import estimate_tokens


def est(text: str) -> int:
    """EstimateTokens is the caller's, a deterministic pure function (here: characters)."""
    return len(text)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(cid: str) -> dict[str, Any]:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": "lookup", "arguments": ""}}]}


def result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def answer(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


HISTORY = [
    user("查订单"), call("c1"), result("c1", "已发货"), answer("已发货"),  # g0: 3 + 8 ("\nlookup\n") + 3 + 3 = 17
    user("查退款"), call("c2"), result("c2", "处理中"), answer("退款处理中"),  # g4: 3 + 8 + 3 + 5 = 19
    user("谢谢"), answer("不客气"),  # g8: 2 + 3 = 5
]


def test_projection_groups_whole_interactions() -> None:
    """One atomic group per user interaction (分组)."""
    groups = group_interactions(HISTORY, estimate=est)
    assert [g.id for g in groups] == ["g0", "g4", "g8"]
    assert [len(g.messages) for g in groups] == [4, 4, 2]
    assert [g.tokens for g in groups] == [17, 19, 5]  # the caller's counts, no framing added on top


def test_projection_budget_enough_keeps_everything() -> None:
    """Budget = window - system - reserve - margin."""
    p = project(HISTORY, window=80, system_tokens=10, output_reserve=20, safety_margin=5, estimate=est)
    assert p.budget == 45 and p.used_tokens == 41
    assert p.kept_group_ids == ["g0", "g4", "g8"] and p.overflow_tokens == 0


def test_projection_only_the_newest_group_fits() -> None:
    """Newest to oldest, stop at the first group that does not fit."""
    p = project(HISTORY, window=20, estimate=est)
    assert p.kept_group_ids == ["g8"] and p.dropped_group_ids == ["g0", "g4"]
    assert p.messages == HISTORY[8:]


def test_projection_never_cuts_half_a_group() -> None:
    """No kept tool call without its result, at any budget."""
    for window in range(0, 50):
        p = project(HISTORY, window=window, estimate=est)
        assert p.dangling_call_ids == [] and p.orphan_result_ids == []
        assert sum(len(g.messages) for g in p.groups if g.id in p.kept_group_ids) == len(p.messages)


def test_projection_newest_group_over_budget_is_kept_whole_with_overflow() -> None:
    """Keep the whole group and report the overflow."""
    p = project(HISTORY[:8], window=4, estimate=est)
    assert p.kept_group_ids == ["g4"] and p.overflow_tokens == 19 - 4


# --------------------------------------------------------------------------- #
# Compaction with survival checks

ORDER, AMOUNT, POLICY = "DD20241107-5531", "退款金额 328.00 元", "退货政策第 7.2 条"
DEADLINE = "周五要跟老板汇报，记得那天给我回个话"  # a hard requirement that does not read like a conclusion


def support_history() -> list[Record]:
    chat = ["好的，我明白您的意思，我们这边会尽快帮您处理这个问题，请您耐心等一下",
            "嗯嗯，这个商品我挺喜欢的，就是这次运输过程中出了点状况，有点可惜",
            "理解您的心情，我们一直很重视每一位老顾客的购物体验，给您添麻烦了"]
    turns = [
        ("我的订单 " + ORDER + " 收到的时候外包装已经破了，里面的杯子也碎了", "您好，非常抱歉，我先帮您查一下这个订单"),
        ("查到了吗？", "查到了，" + AMOUNT + "，原路退回到您的支付账户"),
        ("为什么能退？", "根据" + POLICY + "，运输破损在签收后七天内可以全额退款"),
    ]
    turns += [(chat[i % 3], chat[(i + 1) % 3]) for i in range(14)]
    turns += [(DEADLINE, "收到")]
    turns += [("好的", "嗯") for _ in range(5)]
    records = []
    for n, (u, a) in enumerate(turns):
        records += [Record(f"u{n}", "user", u, turn=n), Record(f"a{n}", "assistant", a, turn=n)]
    return records


FACTS = [ORDER, AMOUNT, POLICY, DEADLINE]


def _tokens(records: list[Record]) -> int:
    return sum(estimate_tokens(r.text) for r in records)


def test_compaction_compaction_starts_at_the_occupancy_threshold() -> None:
    """Occupancy decides; at threshold 0.9 it does not compact."""
    occupied = _tokens(support_history())
    window = int(occupied / 0.8)
    assert should_compact(occupied, window, threshold=0.8)
    assert not should_compact(occupied, window, threshold=0.9)


def test_compaction_two_parts_summary_then_recent_turns_verbatim() -> None:
    """A three-section summary, then the last turns word for word."""
    history = support_history()
    result = compact(history, keep_last=6, constraints=[DEADLINE], required_evidence=FACTS[:3])
    live = result.model_records()
    assert live[0].kind == "summary"
    assert [h in live[0].text for h in ("已定结论：", "待办事项：", "硬约束：")] == [True, True, True]
    assert conversation_language([r.text for r in history]) == "zh"
    assert [r.text for r in live[1:]] == [r.text for r in history[-12:]]


def test_compaction_compression_ratio_between_65_and_90_percent() -> None:
    """压缩率 (share saved) in 65-90 % (the reference: 68.1 %)."""
    result = compact(support_history(), keep_last=6)
    assert 0.65 <= result.saved_ratio <= 0.90
    assert abs(result.saved_ratio + result.kept_ratio - 1) < 1e-9  # r is the share kept


def test_compaction_the_four_key_facts_survive() -> None:
    """All four survival checks pass (the script exits 0)."""
    result = compact(support_history(), keep_last=6, constraints=[DEADLINE], required_evidence=FACTS[:3])
    assert result.ok and all(inv.ok for inv in result.invariants)
    assert sum(inv.checked for inv in result.invariants) == 4


def test_compaction_keeping_one_turn_loses_the_deadline() -> None:
    """Keep 1 turn and the reply deadline fails its check (exit 1)."""
    result = compact(support_history(), keep_last=1, constraints=[DEADLINE], required_evidence=FACTS[:3])
    assert not result.ok
    assert [(inv.name, inv.lost) for inv in result.failed] == [("user_constraints", [DEADLINE])]
    assert result.saved_ratio > compact(support_history(), keep_last=6).saved_ratio
