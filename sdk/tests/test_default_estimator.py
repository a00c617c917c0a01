"""With the default estimator, the allocator and the line operators work cuts out by arithmetic
(CJK counts add up over a join) and share one call's memo of line counts: their results equal
those of the same counts asked one by one (an estimator not recognised as the default)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context.allocator import Segment, allocate
from ctxkit.context.allocator import cache as alloc_cache
from ctxkit.context.operators.extract import LinePlan, cut_lines, plan_extract, plan_summary
from ctxkit.context.tokens import count_cjk, estimate_tokens, memo_estimator


def counted(piece: str) -> int:
    """The default estimator's counts, behind a function not recognised as the default."""
    return estimate_tokens(piece)


# Segments of every policy, one-line turns (dropped on a tight budget) among them.
_SEGMENT = st.builds(
    lambda k, policy, text, priority, ref, lines: Segment(
        name=f"seg-{k}", kind="tool_result" if policy == "truncate" else "history",
        text="\n".join([text] * lines), priority=priority, policy=policy, source_ref=ref,
        min_tokens=3 if k % 4 == 0 else 0),
    st.integers(0, 10**6),
    st.sampled_from(["extract", "summarize", "truncate", "drop", "pin"]),
    st.text(alphabet=st.sampled_from("ab 退款 429 error=1 must"), min_size=1, max_size=60),
    st.integers(0, 100), st.sampled_from([None, "log#1"]), st.sampled_from([1, 1, 2, 3]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_SEGMENT, max_size=10, unique_by=lambda s: s.name), st.integers(0, 300))
def test_an_allocation_with_the_default_estimator_equals_one_that_counts(segments: list[Segment], budget: int) -> None:
    fast = allocate(segments, budget=budget)
    slow = allocate(segments, budget=budget, estimate=counted)
    assert [a.to_dict() for a in fast.allocations] == [a.to_dict() for a in slow.allocations]


def test_it_records_a_one_line_turn_that_cannot_fit_as_the_line_plan_would() -> None:
    alloc_cache.clear()
    turn = "user: step 7 — 查询 app 渠道退款率 " + "detail " * 30
    segments = [
        Segment(name="sys", kind="system", text="system rules " * 40, priority=100, policy="pin"),
        Segment(name="turn", kind="history", text=turn, priority=20, policy="summarize", min_tokens=5),
        Segment(name="fact", kind="retrieval", text="单行检索片段 " * 20, priority=10, policy="extract", min_tokens=3),
    ]
    plan = allocate(segments, budget=160, reserve=20)
    for name, make in (("turn", plan_summary), ("fact", plan_extract)):
        a = plan.get(name)
        assert 0 < a.granted < a.requested  # a grant that buys a part, but not the one line
        estimate = memo_estimator()
        expected_text, expected = cut_lines(make(segments[[s.name for s in segments].index(name)].text,
                                                 estimate=estimate), a.granted, estimate=estimate)
        assert (a.action, a.text, a.used) == ("drop", expected_text, 0)
        assert a.operations[-1].to_dict() == expected.to_dict()


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["退款率 3：按季度", "error=429 retry", "", "金额 100 元\uff0c", "plain line",
                                 "不得访问外网", "x" * 30]), min_size=1, max_size=8),
       st.integers(min_value=0, max_value=80), st.sampled_from([None, "web#3", "网页#3"]),
       st.sampled_from([plan_extract, plan_summary]))
def test_it_cuts_a_line_plan_by_arithmetic_as_by_counting(
    lines: list[str], budget: int, ref: str | None, make: Callable[..., LinePlan]
) -> None:
    text = "\n".join(lines)
    fast = cut_lines(make(text, estimate=memo_estimator()), budget, ref=ref, estimate=memo_estimator())
    slow = cut_lines(make(text, estimate=counted), budget, ref=ref, estimate=counted)
    assert (fast[0], fast[1].to_dict()) == (slow[0], slow[1].to_dict())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["退款率 3：按季度", "error=429 retry", "", "  ", "金额 100 元\uff0c",
                                          "\ufff9x", "\U00020000字", "plain line", "不得访问外网"]),
                         min_size=1, max_size=6), min_size=1, max_size=6),
       st.sampled_from([(), ("plain line",), ("不得访问外网", "error=429 retry")]), st.integers(0, 3))
def test_it_makes_line_plans_with_a_shared_line_memo_as_without(
    texts: list[list[str]], pinned: tuple[str, ...], keep_recent: int
) -> None:
    # One call's memo of line CJK counts, shared by many plans, against a plan made alone.
    line_cjk: dict[str, int] = {}
    for lines in texts:
        text = "\n".join(lines)
        for make, kwargs in ((plan_extract, {}), (plan_summary, {"keep_recent": keep_recent})):
            shared = make(text, pinned=pinned, estimate=memo_estimator(), line_cjk=line_cjk, **kwargs)
            alone = make(text, pinned=pinned, estimate=estimate_tokens, **kwargs)
            assert shared == alone
            assert shared.cjk == tuple(count_cjk(line) for line in lines)
            assert shared.costs == tuple(estimate_tokens(lines[n] + "\n") for n in shared.order)
