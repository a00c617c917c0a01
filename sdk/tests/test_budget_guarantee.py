"""ContextBuilder never overruns the budget: |x| + R <= W on the final text.

|x| is measured on everything the model reads: the allocated segments, the constraints restated
in TAIL, the caller's blocks (the question) and the separators. Either it fits under
W - R - margin, or the result (and its manifest) is flagged over budget with the reason.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ctxkit.context.allocator import Segment
from ctxkit.context.layout import Block
from ctxkit.context.tokens import estimate_tokens
from ctxkit.fixtures import DEFAULT_BUDGET, TASK, fixture_segments, reserve_for
from ctxkit.record.builder import DEFAULT_RESERVE, ContextBuilder

WORDS = ["退款率", "不得", "必须", "429", "error", "单位为分", "bi://refund/v2", "rate", "limit", "ok", "行",
         "金额", "0.0321", "timeout", "detail"]
POLICIES = ["pin", "extract", "summarize", "truncate", "ref", "window", "schema", "drop"]
KINDS = ["system", "task", "constraint", "memory", "history", "tool_result", "retrieval", "tools"]

line = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)
text = st.lists(line, min_size=0, max_size=12).map("\n".join)


@st.composite
def candidate(draw: st.DrawFn, index: int) -> Segment:
    policy = draw(st.sampled_from(POLICIES))
    # Pinned text is kept short most of the time, so both branches (fits / over budget) are drawn.
    body = draw(text if policy != "pin" else st.lists(line, max_size=3).map("\n".join))
    return Segment(name=f"s{index}", kind=draw(st.sampled_from(KINDS)), text=body, policy=policy,
                   priority=draw(st.integers(0, 100)), min_tokens=draw(st.integers(0, 40)),
                   keep_recent=draw(st.integers(0, 3)), near_dupes=draw(st.booleans()))


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[Segment], list[Block], int, int, int]:
    n = draw(st.integers(0, 8))
    segments = [draw(candidate(i)) for i in range(n)]
    blocks: list[Block] = []
    for i in range(draw(st.integers(0, 3))):  # restated constraints (HEAD, copied to TAIL)
        blocks.append(Block(id=f"c{i}", kind="constraint", text=draw(line)))
    if draw(st.booleans()):
        blocks.append(Block(id="question", kind="user", text=draw(line)))
    budget = draw(st.integers(1, 1500))
    reserve = draw(st.integers(0, budget))
    margin = draw(st.integers(0, max(0, budget - reserve)))
    return segments, blocks, budget, reserve, margin


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_no_result_exceeds_window_minus_reserve_unless_flagged_with_reason(case) -> None:
    """|x| + R <= W is the one rule that must never break."""
    segments, blocks, budget, reserve, margin = case
    builder = ContextBuilder(budget=budget, reserve=reserve, safety_margin=margin)
    built = builder.build(segments, blocks=blocks)
    measured = estimate_tokens(built.text())
    assert built.measured_tokens == measured
    manifest = built.manifest(call_id="c", run_id="r", step=0, model="m")
    assert manifest.budget.measured_tokens == measured
    event("over budget" if built.over_budget else "fits")
    if measured + reserve + margin <= budget:
        assert not built.over_budget and not manifest.budget.over_budget
    else:
        assert built.over_budget and built.over_budget_reason
        assert manifest.budget.over_budget and manifest.budget.over_budget_reason
        # Only what may never be cut is left: pinned segments and the caller's blocks.
        assert all(a.pinned or not a.text for a in built.plan.allocations)
        assert "pinned segments" in manifest.budget.over_budget_reason


def test_restated_constraint_and_question_are_counted() -> None:
    """The TAIL copy of a constraint and the question count against the budget, not the reserve."""
    budget = DEFAULT_BUDGET
    reserve = reserve_for(budget)
    question = Block(id="question", kind="user", text="各渠道 2024 Q3 退款率是多少？请给出 ref。" * 3)
    constraint = Block(id="unit", kind="constraint", text="金额单位必须为「分」，禁止外网。" * 4)
    builder = ContextBuilder(budget=budget, reserve=reserve)
    built = builder.build(fixture_segments(), blocks=[question, constraint])
    assert built.layout is not None and any(p.id == "unit#restated" for p in built.layout.tail)
    assert built.measured_tokens is not None
    assert built.measured_tokens + reserve <= budget
    assert not built.over_budget
    # The allocation alone had room for everything, yet the blocks did not: it re-allocated.
    unfitted = ContextBuilder(budget=budget, reserve=reserve).build(fixture_segments()).plan.used
    assert built.plan.used < unfitted
    assert any("held back" in n for n in built.notes)


def test_pinned_items_over_the_cap_are_flagged_with_the_reason_in_the_manifest() -> None:
    """P + R > W has no allocation; say so, never fake capacity."""
    segments = [Segment(name="task", kind="task", text=TASK, policy="pin", priority=95),
                Segment(name="notes", kind="memory", text="用户偏好：中文输出。", priority=50)]
    builder = ContextBuilder(budget=200, reserve=100)
    built = builder.build(segments, blocks=[Block(id="q", kind="user", text="结论？")])
    assert built.over_budget
    assert built.plan.get("task").text == TASK  # pinned segments survive whole
    assert built.plan.get("notes").action == "drop"
    m = built.manifest(call_id="c", run_id="r", step=0, model="m")
    assert m.budget.over_budget is True
    assert "input cap 100" in (m.budget.over_budget_reason or "")
    assert m.budget.measured_tokens == built.measured_tokens > 100
    assert any("pinned segments" in w for w in m.warnings)


def test_naive_baseline_is_flagged_not_silent() -> None:
    """Reported, not hidden."""
    built = ContextBuilder(budget=800, reserve=160, naive=True).build(fixture_segments())
    assert built.over_budget and "naive baseline" in (built.over_budget_reason or "")


def test_default_reserve_is_the_largest_step_output_plus_ten_percent() -> None:
    """R is the largest single-step output (a tool call's JSON, 800) + 10 %."""
    assert ContextBuilder(budget=128_000).reserve == DEFAULT_RESERVE == 880
    assert ContextBuilder(budget=1200).reserve == 240  # never more than a fifth of a small budget


def test_a_pinned_constraint_is_restated_at_the_end_or_the_plan_is_over_budget() -> None:
    """Hard constraints go at the start and again at the end of the context. When the pinned parts
    fit the cap but their TAIL copy does not, the copy is kept and the plan says it is over budget
    (with the figures), instead of reporting a fit and only warning that the copy went missing."""
    time_limit = TASK.splitlines()[2]  # "约束 2：每次查询必须在 30 秒内完成，超时即返回 partial=true 的部分结果。"
    segments = [*fixture_segments(),
                Segment(name="time_limit", kind="constraint", text=time_limit, priority=100, policy="pin")]
    without_copy = ContextBuilder(budget=400, reserve=80, restate_constraints=False).build(segments)
    assert not without_copy.over_budget and without_copy.measured_tokens is not None
    assert without_copy.measured_tokens <= 320  # the pinned parts alone fit the cap 400 - 80

    built = ContextBuilder(budget=400, reserve=80).build(segments)
    assert built.layout is not None
    tail = {p.id: p for p in built.layout.tail}
    head = {p.id: p for p in built.layout.head}
    assert tail["time_limit#restated"].content_hash == head["time_limit"].content_hash
    assert built.text().endswith("\n\n" + time_limit)  # the last thing the model reads
    assert built.text().count(time_limit) == without_copy.text().count(time_limit) + 1
    assert built.measured_tokens is not None and built.measured_tokens > 320
    assert built.over_budget and built.plan.over_budget
    reason = built.over_budget_reason or ""
    assert "the restatement at the end of TAIL ('time_limit'" in reason
    found = re.search(r"without the copy they would measure (\d+), within the cap", reason)
    assert found is not None and int(found.group(1)) + tail["time_limit#restated"].tokens <= built.measured_tokens
    assert "input cap 320 = window 400 - reserve 80" in reason
    assert not any("not restated" in note for note in built.notes)

    manifest = built.manifest(call_id="c", run_id="r", step=0, model="m")
    assert manifest.budget.over_budget is True and manifest.budget.over_budget_reason == reason
    items = {i.id: i for i in manifest.items}
    assert items["time_limit#restated"].zone == "tail" and items["time_limit"].zone == "head"

    roomy = ContextBuilder(budget=480, reserve=80).build(segments)  # room for both copies: no flag
    assert not roomy.over_budget and roomy.text().endswith("\n\n" + time_limit)
