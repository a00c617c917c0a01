"""The allocator's behaviours on the six-segment fixture, and the shape of naive against priority allocation.

The fixture (``ctxkit.fixtures``) has six segments and ten key fields; budgets are 800 (small),
1200 (default) and 2400 (large), with a 20 % output reserve.
"""

from __future__ import annotations

import json

from ctxkit.context.allocator import Plan, allocate
from ctxkit.context.operators import MARKER_RE, jaccard_5gram
from ctxkit.context.readback import read_back
from ctxkit.context.tokens import clip, estimate_tokens
from ctxkit.fixtures import (
    DEFAULT_BUDGET,
    FOOTER,
    INJECTION,
    KEY_FIELDS,
    LARGE_BUDGET,
    SMALL_BUDGET,
    SYSTEM,
    TASK,
    WEB_PAGE,
    fixture_segments,
    reserve_for,
)
from ctxkit.manifest import ACTIONS


def run(budget: int, naive: bool = False) -> Plan:
    return allocate(fixture_segments(), budget=budget, reserve=reserve_for(budget), naive=naive)


def kept_fields(plan: Plan) -> int:
    return sum(r.present for r in read_back(KEY_FIELDS, plan.outputs()))


def test_naive_small_loses_most_priority_keeps_more_large_keeps_all() -> None:
    """Naive 800 keeps 3/10, priority 800 6/10, priority 1200 10/10."""
    naive, priority, default = kept_fields(run(SMALL_BUDGET, naive=True)), kept_fields(run(SMALL_BUDGET)), \
        kept_fields(run(DEFAULT_BUDGET))
    assert naive <= 3
    assert priority >= naive + 3  # at the same budget
    assert default == len(KEY_FIELDS) == 10


def test_failure_evidence_survives_history_summary() -> None:
    history = run(DEFAULT_BUDGET).get("history")
    assert history.action == "summarize" and history.used < history.requested
    assert "tool(web_fetch): error=HTTP 429 Too Many Requests retry_after=20s（限流失败）" in history.text
    assert "除以 100" in history.text


def test_key_fields_survive_at_1200() -> None:
    results = read_back(KEY_FIELDS, run(DEFAULT_BUDGET).outputs())
    assert [r.field.label for r in results if not r.present] == []
    assert all(r.found_in == r.field.source for r in results)


def test_numeric_field_is_lost_at_800_but_ref_is_kept() -> None:
    tool = run(SMALL_BUDGET).get("tool_result")
    assert tool.action == "truncate"
    assert "0.0321" not in tool.text
    marker = MARKER_RE.search(tool.text)
    assert marker is not None and marker.group(2) == "log#sha256:4be1c0d2" and int(marker.group(1)) > 0


def test_units_and_numbers_survive_tool_truncation() -> None:
    tool = run(DEFAULT_BUDGET).get("tool_result")
    assert tool.action == "truncate"
    assert "refund_rate=0.0321" in tool.text and "elapsed_ms=2310" in tool.text
    assert "code=429 retry_after=20s" in tool.text


def test_exact_duplicate_lines_are_removed() -> None:
    plan = run(LARGE_BUDGET)
    retrieval = plan.get("retrieval")
    assert all(retrieval.text.count(line) == 1 for line in FOOTER)
    assert all(WEB_PAGE.count(line) == 2 for line in FOOTER)
    dedupe = retrieval.operations[0]
    assert dedupe.op == "dedupe" and len(dedupe.data["removed"]) == 3
    assert retrieval.requested < retrieval.raw_tokens and plan.dedupe_saved > 0


def test_near_duplicate_similarity() -> None:
    faq = [line for line in WEB_PAGE.split("\n") if line.startswith("常见问题")]
    assert jaccard_5gram(faq[0], faq[1]) >= 0.75
    assert jaccard_5gram(faq[0], FOOTER[0]) < 0.75
    retrieval = run(LARGE_BUDGET).get("retrieval")
    assert retrieval.text.count("常见问题") == 1 and "near-duplicate of line(s)" in retrieval.text


def test_over_budget_does_not_fake_capacity() -> None:
    plan = allocate(fixture_segments(), budget=300, reserve=reserve_for(300))
    assert plan.over_budget is True
    assert plan.cap == 240 and plan.reserve == 60
    assert plan.used > plan.cap and plan.headroom < 0
    assert all(a.granted == 0 for a in plan.allocations if not a.pinned)


def test_pinned_segments_survive_even_when_over_budget() -> None:
    plan = allocate(fixture_segments(), budget=300, reserve=reserve_for(300))
    assert plan.get("system").text == SYSTEM and plan.get("task").text == TASK
    assert plan.get("system").action == plan.get("task").action == "keep"


def test_naive_does_not_dedupe() -> None:
    plan = run(LARGE_BUDGET, naive=True)
    assert plan.get("retrieval").text == WEB_PAGE
    assert plan.dedupe_saved == 0


def test_naive_has_no_reserve_and_loses_fields() -> None:
    plan = run(SMALL_BUDGET, naive=True)
    assert plan.reserve == 0 and plan.cap == plan.used == SMALL_BUDGET
    assert plan.get("task").action == "hard_cut"
    assert kept_fields(plan) < kept_fields(run(SMALL_BUDGET))


def test_output_reserve_is_never_consumed_by_input() -> None:
    for budget in (SMALL_BUDGET, DEFAULT_BUDGET, LARGE_BUDGET):
        plan = run(budget)
        assert plan.cap + plan.reserve == budget
        assert plan.granted <= plan.cap and plan.used <= plan.cap


def test_tiny_budget_still_reserves_output() -> None:
    plan = allocate(fixture_segments(), budget=100, reserve=reserve_for(100))
    assert plan.reserve == 20 and plan.cap == 80
    assert all(a.granted == 0 for a in plan.allocations if not a.pinned)


def test_empty_segment_list() -> None:
    plan = allocate([], budget=1000, reserve=200)
    assert plan.allocations == [] and plan.used == 0 and plan.headroom == 800 and not plan.over_budget
    assert plan.text() == "" and json.loads(json.dumps(plan.to_dict()))["allocations"] == []


def test_plan_is_json_serializable() -> None:
    for plan in (run(SMALL_BUDGET), run(SMALL_BUDGET, naive=True)):
        data = plan.to_dict()
        assert json.loads(json.dumps(data, ensure_ascii=False)) == data
        assert [row["name"] for row in data["allocations"]] == [a.name for a in plan.allocations]
    assert run(SMALL_BUDGET).to_dict()["allocations"][1]["operations"][-1]["op"] == "schema"


def test_actions_are_explained_and_bounded() -> None:
    for budget in (SMALL_BUDGET, DEFAULT_BUDGET):
        for a in run(budget).allocations:
            assert a.action in ACTIONS and a.reason
            assert 0 <= a.used <= a.granted
            if not a.pinned:
                assert f"{a.name} got {a.granted} tokens at budget {budget}" in a.reason
    assert "history got 82 tokens at budget 800" in run(SMALL_BUDGET).get("history").reason


def test_low_priority_loses_the_most() -> None:
    plan = run(DEFAULT_BUDGET)
    others = sorted((a for a in plan.allocations if not a.pinned), key=lambda a: -a.priority)
    grants = [a.granted for a in others]
    assert grants == sorted(grants, reverse=True)
    assert others[-1].name == "tool_result" and others[-1].granted == min(grants)


def test_cjk_costs_more_per_char() -> None:
    chinese, english = "统计退款率并写报告", "count refunds and write"
    assert estimate_tokens(chinese) / len(chinese) > 2 * estimate_tokens(english) / len(english)


def test_clip_respects_budget() -> None:
    for budget in (0, 1, 17, 40, 1000):
        cut = clip(TASK, budget)
        assert TASK.startswith(cut) and estimate_tokens(cut) <= budget


def test_injection_is_truncated_at_default_budget() -> None:
    plan = run(DEFAULT_BUDGET)
    assert plan.get("tool_result").action == "truncate"
    assert INJECTION not in plan.text()


def test_large_budget_lets_untrusted_text_in() -> None:
    # Deliberately asserts the BAD behaviour to pin the risk: truncation is not a defence.
    # If this fails because the injection is gone, something now filters untrusted text;
    # if someone raises the default budget, the default case above fails instead.
    plan = run(LARGE_BUDGET)
    assert plan.get("tool_result").action in ("keep", "compress")
    assert INJECTION in plan.text()


def test_tool_result_is_labelled_untrusted() -> None:
    plan = run(DEFAULT_BUDGET)
    assert plan.get("tool_result").trust == "untrusted"
    assert plan.get("tool_result").to_item().trust == "untrusted"
    assert plan.get("system").trust == "trusted"


def test_key_fields_are_the_readback_table() -> None:
    """The ten key fields (literal @ segment) that the read-back checks."""
    table = [("不得修改 public API 兼容性", "task"), ("单位必须为「分」", "task"), ("30 秒", "task"),
                  ("禁止外网", "task"), ("partial=true", "task"), ("0.0321", "tool_result"), ("429", "history"),
                  ("除以 100", "history"), ("2024 Q3", "memory"), ("bi://refund/v2", "memory")]
    # The fixture's memory is a fetched page (segment "retrieval", with repeated footer lines and a
    # near-duplicate paragraph): the memory fields live there.
    ours = [(f.literal, "memory" if f.source == "retrieval" else f.source) for f in KEY_FIELDS]
    assert ours == table
