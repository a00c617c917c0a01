"""Atomic interaction groups and budgeted projection."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context.grouping import (
    MESSAGE_OVERHEAD,
    group_interactions,
    message_tokens,
    project,
    tool_call_ids,
    tool_result_ids,
)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def final(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def oa_calls(*ids: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": "bi_query", "arguments": '{"q": 1}'}}
                       for i in ids],
    }


def oa_result(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def an_calls(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": "checking"}] + [
        {"type": "tool_use", "id": i, "name": "bi_query", "input": {"q": 1}} for i in ids]}


def an_results(*ids: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": text} for i in ids]}


def kept_pairs(messages: list[dict[str, Any]]) -> tuple[set[str], set[str]]:
    calls = {c for m in messages for c in tool_call_ids(m)}
    results = {r for m in messages for r in tool_result_ids(m)}
    return calls, results


OPENAI = [
    user("统计退款率"),
    oa_calls("a", "b"),
    oa_result("a"),
    oa_result("b"),
    final("app 0.0318"),
    user("再查 web"),
    oa_calls("c"),
    oa_result("c", "error 429"),
    final("限流"),
    user("换内部数据"),
    final("好"),
]


def test_it_splits_an_openai_history_at_user_messages() -> None:
    groups = group_interactions(OPENAI)
    assert [g.id for g in groups] == ["g0", "g5", "g9"]
    assert [len(g.messages) for g in groups] == [5, 4, 2]
    assert groups[0].call_ids == ["a", "b"] and groups[0].result_ids == ["a", "b"]
    assert all(g.complete for g in groups)
    assert sum(g.tokens for g in groups) == sum(message_tokens(m) for m in OPENAI)


def test_anthropic_tool_results_inside_a_user_message_do_not_start_a_group() -> None:
    history = [user("q1"), an_calls("t1", "t2"), an_results("t2", "t1"), final("done"), user("q2"), final("ok")]
    groups = group_interactions(history)
    assert [len(g.messages) for g in groups] == [4, 2]
    assert set(groups[0].call_ids) == set(groups[0].result_ids) == {"t1", "t2"}


def test_results_out_of_order_stay_with_their_calls() -> None:
    history = [user("q"), oa_calls("a", "b", "c"), oa_result("c"), oa_result("a"), oa_result("b"), final("x")]
    [group] = group_interactions(history)
    assert group.complete and group.result_ids == ["c", "a", "b"]


def test_a_result_arriving_after_the_next_user_message_merges_the_groups() -> None:
    history = [user("q1"), oa_calls("slow"), final("waiting"), user("q2"), oa_result("slow"), final("got it"),
               user("q3"), final("ok")]
    groups = group_interactions(history)
    assert [g.id for g in groups] == ["g0", "g6"]
    assert groups[0].complete and len(groups[0].messages) == 6


def test_messages_before_the_first_user_message_form_a_preamble() -> None:
    groups = group_interactions([{"role": "system", "content": "rules"}, user("q"), final("a")])
    assert [(g.id, g.kind) for g in groups] == [("g0", "preamble"), ("g1", "interaction")]


def test_message_tokens_count_tool_call_arguments_and_result_blocks() -> None:
    plain = message_tokens({"role": "assistant", "content": None})
    assert plain == MESSAGE_OVERHEAD
    assert message_tokens(oa_calls("a")) > plain
    assert message_tokens(an_results("t", text="x" * 400)) >= 100 + MESSAGE_OVERHEAD


# The five projection checks: grouping / budget enough / only the newest fits / never half a group / newest over


def test_project_keeps_everything_when_the_budget_is_enough() -> None:
    p = project(OPENAI, window=10_000, system_tokens=100, output_reserve=500, safety_margin=50)
    assert p.budget == 10_000 - 100 - 500 - 50
    assert p.messages == OPENAI and p.dropped_group_ids == [] and p.overflow_tokens == 0


def test_project_keeps_only_the_newest_groups_that_fit() -> None:
    groups = group_interactions(OPENAI)
    newest_two = groups[1].tokens + groups[2].tokens
    p = project(OPENAI, window=newest_two + 10, output_reserve=10)
    assert p.kept_group_ids == ["g5", "g9"] and p.dropped_group_ids == ["g0"]
    assert p.used_tokens == newest_two and p.messages == OPENAI[5:]
    p = project(OPENAI, window=newest_two - 1)
    assert p.kept_group_ids == ["g9"]


def test_project_stops_at_the_first_group_that_does_not_fit() -> None:
    history = [user("old"), final("x"), user("middle " * 200), final("y"), user("new"), final("z")]
    groups = group_interactions(history)
    p = project(history, window=groups[0].tokens + groups[2].tokens + 1)
    assert p.kept_group_ids == ["g4"]  # the small oldest group is not pulled over the gap


def test_project_never_keeps_half_a_group() -> None:
    for window in range(0, 200, 3):
        p = project(OPENAI, window=window)
        calls, results = kept_pairs(p.messages)
        assert calls == results
        assert p.messages == [m for g in p.groups if g.id in p.kept_group_ids for m in g.messages]


def test_the_newest_group_over_budget_is_kept_whole_with_overflow() -> None:
    history = [user("q"), oa_calls("a"), oa_result("a", "row " * 500), final("done")]
    p = project(history, window=100, output_reserve=20)
    assert p.messages == history
    assert p.budget == 80
    assert p.overflow_tokens == p.used_tokens - 80 > 0


def test_project_of_an_empty_history() -> None:
    p = project([], window=100)
    assert p.messages == [] and p.groups == [] and p.used_tokens == 0 and p.overflow_tokens == 0


def test_pairing_problems_in_the_input_are_reported() -> None:
    history = [user("q"), oa_result("ghost"), oa_calls("pending")]
    p = project(history, window=1000)
    assert p.orphan_result_ids == ["ghost"] and p.dangling_call_ids == ["pending"]
    assert p.to_dict()["orphan_result_ids"] == ["ghost"]


# --------------------------------------------------------------------------- #
# Property: whatever the history and budget, the kept context pairs every call with its result


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    anthropic = draw(st.booleans())
    text = st.text(alphabet="ab 退款429", min_size=0, max_size=60)
    history: list[dict[str, Any]] = []
    if draw(st.booleans()):
        history.append({"role": "system", "content": draw(text)})
    late: list[str] = []
    counter = 0
    turns = draw(st.integers(min_value=0, max_value=6))
    for turn in range(turns):
        history.append(user(draw(text)))
        if late:  # results of calls made before this user message
            history.extend([an_results(*late)] if anthropic else [oa_result(c) for c in late])
            late = []
        for _ in range(draw(st.integers(min_value=0, max_value=3))):
            ids = [f"c{counter + i}" for i in range(draw(st.integers(min_value=1, max_value=3)))]
            counter += len(ids)
            history.append(an_calls(*ids) if anthropic else oa_calls(*ids))
            order = draw(st.permutations(ids))
            deferred = set(draw(st.sets(st.sampled_from(ids)))) if turn < turns - 1 else set()
            now = [c for c in order if c not in deferred]
            late.extend(c for c in order if c in deferred)
            if now:
                history.extend([an_results(*now, text=draw(text))] if anthropic else
                               [oa_result(c, draw(text)) for c in now])
        history.append(final(draw(text)))
    return history


@settings(max_examples=300, deadline=None)
@given(histories(), st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=50))
def test_kept_context_never_has_a_call_without_its_result(history, window, reserve) -> None:
    p = project(history, window=window, output_reserve=reserve)
    calls, results = kept_pairs(p.messages)
    assert calls == results
    assert p.dangling_call_ids == [] and p.orphan_result_ids == []
    # groups partition the history; the kept ones are its newest suffix
    assert [m for g in p.groups for m in g.messages] == history
    ids = [g.id for g in p.groups]
    assert p.kept_group_ids == ids[len(ids) - len(p.kept_group_ids):]
    assert p.overflow_tokens == max(0, p.used_tokens - p.budget)
    if p.overflow_tokens:
        assert len(p.kept_group_ids) == 1
    assert project(history, window=window, output_reserve=reserve) == p  # deterministic
