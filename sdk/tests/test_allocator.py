"""The budget allocator: reserve, pinning, floors, weighted shares, aging, policies, naive mode."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, cast

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context.allocator import Segment, allocate
from ctxkit.context.allocator import cache as alloc_cache
from ctxkit.context.tokens import estimate_tokens
from ctxkit.fixtures import fixture_segments
from ctxkit.manifest import ACTIONS, SCHEMA_V1, convert_manifest

FILLER = "\n".join(f"row {i}: channel=app refund_rate=0.03{i:02d} status=ok" for i in range(60))


def seg(name: str, priority: int, policy: str = "truncate", text: str | None = None, **kw) -> Segment:
    """A segment; without ``text`` a long distinct log (identical texts would be deduped)."""
    text = f"{name}:\n{FILLER}" if text is None else text
    return Segment(name=name, kind="history", text=text, priority=priority, policy=policy, **kw)


def test_segment_rejects_unknown_kind_policy_and_bad_numbers() -> None:
    with pytest.raises(ValueError):
        Segment(name="a", kind=cast(Any, "webpage"), text="")
    with pytest.raises(ValueError):
        Segment(name="a", kind="history", text="", policy=cast(Any, "squeeze"))
    with pytest.raises(ValueError):
        Segment(name="a", kind="history", text="", priority=1001)
    with pytest.raises(ValueError):
        Segment(name="", kind="history", text="")
    with pytest.raises(ValueError):
        Segment(name="a", kind="history", text="", head_ratio=1.0)


def test_allocate_rejects_duplicate_names_and_negative_budgets() -> None:
    with pytest.raises(ValueError):
        allocate([seg("a", 1), seg("a", 2)], budget=100)
    with pytest.raises(ValueError):
        allocate([seg("a", 1)], budget=-1)


def test_the_rest_is_shared_by_priority_weight_with_int_floor_and_a_deterministic_round() -> None:
    # pool 100 over weights 60/50/40/30 (sum 180): int shares 33/27/22/16 = 98, the 2 left go
    # one each to the two highest priorities.
    segments = [seg("tools", 60), seg("memory", 50), seg("history", 40), seg("tool_result", 30)]
    plan = allocate(segments, budget=100)
    assert [a.granted for a in plan.allocations] == [34, 28, 22, 16]
    assert plan.granted == 100


def test_capped_segments_leave_their_share_to_the_others() -> None:
    small = seg("small", 90, text="tiny text")  # needs 3 tokens, its share would be 90
    plan = allocate([small, seg("a", 50), seg("b", 50)], budget=200)
    assert plan.get("small").granted == plan.get("small").requested == 3
    assert plan.get("a").granted + plan.get("b").granted == 197
    assert abs(plan.get("a").granted - plan.get("b").granted) <= 1


def test_shares_never_exceed_the_pool_when_the_needs_only_just_do() -> None:
    segments = [seg(name, p, text="x" * (4 * need)) for name, p, need in (("a", 50, 10), ("b", 30, 20), ("c", 20, 30))]
    for budget in range(50, 66):
        plan = allocate(segments, budget=budget)
        assert [a.requested for a in plan.allocations] == [10, 20, 30]
        assert plan.granted == min(budget, 60)


def test_zero_priority_only_gets_what_the_weighted_segments_leave() -> None:
    plan = allocate([seg("zero", 0), seg("one", 1)], budget=100)
    assert plan.get("zero").granted == 0 and plan.get("one").granted == 100
    plan = allocate([seg("zero", 0), seg("one", 1, text="x" * 40)], budget=100)
    assert plan.get("one").granted == 10 and plan.get("zero").granted == 90


def test_floors_are_given_by_priority_before_the_weighted_share() -> None:
    segments = [seg("low", 10, min_tokens=30), seg("high", 90, min_tokens=30)]
    plan = allocate(segments, budget=80)
    assert plan.get("high").granted == 30 + 18  # floor, then 90/100 of the 20 left
    assert plan.get("low").granted == 30 + 2
    plan = allocate(segments, budget=40)
    assert (plan.get("high").granted, plan.get("low").granted) == (30, 10)  # floors go by priority


def test_pinned_segments_are_kept_whole_and_charged_first() -> None:
    task = Segment(name="task", kind="task", text="约束：禁止外网。" * 10, priority=95, policy="pin")
    plan = allocate([seg("history", 40), task], budget=400, reserve=100)
    t = plan.get("task")
    assert t.action == "keep" and t.text == task.text and t.granted == t.used == t.requested
    assert plan.get("history").granted == 300 - t.requested


def test_pinned_over_the_cap_is_reported_not_faked() -> None:
    task = Segment(name="task", kind="task", text="不得修改接口。" * 40, priority=95, policy="pin")
    plan = allocate([task, seg("history", 40)], budget=200, reserve=50)
    assert plan.over_budget is True
    assert plan.cap == 150 and plan.reserve == 50
    assert plan.get("task").used > plan.cap
    assert plan.get("history").granted == 0 and plan.get("history").action == "drop"
    assert "exceed the input cap 150" in plan.get("history").reason
    assert plan.headroom == plan.cap - plan.used < 0
    assert any("pinned segments need" in w for w in plan.warnings)


def test_safety_margin_comes_off_the_cap_like_the_reserve() -> None:
    plan = allocate([seg("a", 10, text=FILLER * 2)], budget=1000, reserve=200, safety_margin=50)
    assert plan.cap == 750 and plan.get("a").granted == 750
    budget = plan.to_budget()
    assert (budget.window, budget.output_reserve, budget.safety_margin, budget.input_cap) == (1000, 200, 50, 750)


def test_reserve_larger_than_budget_leaves_no_input_and_warns() -> None:
    plan = allocate([seg("a", 10)], budget=100, reserve=150)
    assert plan.cap == 0 and plan.used == 0 and plan.warnings


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=3000), st.integers(min_value=0, max_value=400))
def test_used_never_exceeds_granted_and_input_never_eats_the_reserve(budget: int, reserve: int) -> None:
    plan = allocate(fixture_segments(), budget=budget, reserve=reserve)
    for a in plan.allocations:
        assert a.used <= a.granted
        assert a.used == estimate_tokens(a.text)
        assert a.action in ACTIONS
    if not plan.over_budget:
        assert plan.granted <= plan.cap == max(0, budget - reserve)
        assert plan.used + plan.reserve <= budget or plan.cap == 0


def test_allocation_is_deterministic() -> None:
    one = allocate(fixture_segments(), budget=1000, reserve=200).to_dict()
    two = allocate(list(reversed(fixture_segments())), budget=1000, reserve=200).to_dict()
    by_name = {a["name"]: {k: v for k, v in a.items() if k != "position"} for a in two["allocations"]}
    assert [{k: v for k, v in a.items() if k != "position"} for a in one["allocations"]] == [
        by_name[a["name"]] for a in one["allocations"]
    ]


def test_aging_lets_a_starved_segment_in_and_then_resets() -> None:
    big = seg("big", 90)
    note = seg("note", 10, policy="drop", text="remember: the export job expires after 48 hours, retry then")
    starvation: dict[str, int] = {}
    plan = allocate([big, note], budget=100)
    assert plan.get("note").action == "drop" and plan.starvation == {"note": 1}
    assert allocate([big, note], budget=100).starvation == {"note": 1}  # without aging it never changes
    for call in range(1, 10):
        plan = allocate([big, note], budget=100, aging=starvation, aging_step=10)
        if plan.get("note").action == "keep":
            break
        starvation = plan.starvation
        assert starvation == {"note": call}
    assert plan.get("note").action == "keep" and call <= 4
    assert plan.get("note").effective_priority == 10 + 10 * (call - 1)
    assert "aged priority" in plan.get("note").reason
    assert plan.starvation == {}


def test_exact_duplicate_segments_are_deduped_with_provenance() -> None:
    a = seg("retrieved_1", 50, source_ref="doc#1")
    b = seg("retrieved_2", 40, text="retrieved_1:\n" + FILLER.upper(), source_ref="doc#2")
    plan = allocate([b, a], budget=2000)
    assert plan.get("retrieved_2").action == "dedupe" and plan.get("retrieved_2").duplicate_of == "retrieved_1"
    assert plan.get("retrieved_2").granted == plan.get("retrieved_2").used == 0
    assert plan.get("retrieved_1").merged_sources == ("doc#2",)
    assert plan.dedupe_saved == plan.get("retrieved_2").raw_tokens


def test_near_duplicate_segments_merge_when_they_opt_in() -> None:
    text = "\n".join(f"FAQ {i}: refunds are processed within 7 business days." for i in range(5))
    a = seg("page", 60, text=text, near_dupes=True)  # higher priority: it survives
    b = seg("mirror", 50, text=text.replace("FAQ 4: refunds", "FAQ 4: all refunds"), near_dupes=True)
    c = seg("other", 50, text=text.replace("FAQ 3: refunds", "FAQ 3: all refunds"))
    plan = allocate([a, b, c], budget=2000)
    assert plan.get("mirror").action == "dedupe" and "near-duplicate" in plan.get("mirror").reason
    assert plan.get("page").merged_sources == ("mirror",)
    assert plan.get("other").action == "keep"  # did not opt in


def test_policies_map_to_manifest_actions() -> None:
    segments = [
        seg("e", 50, "extract"),
        seg("s", 50, "summarize"),
        seg("t", 50, "truncate"),
        seg("r", 50, "ref", source_ref="bi://refund/v2", why="full table"),
        seg("w", 50, "window"),
        seg("d", 50, "drop"),
    ]
    plan = allocate(segments, budget=600)
    assert [a.action for a in plan.allocations] == ["extract", "summarize", "truncate", "ref", "truncate", "drop"]
    ref = json.loads(plan.get("r").text)
    assert ref["ref"] == "bi://refund/v2" and ref["why"] == "full table"
    assert plan.get("w").text.split("\n")[0].startswith("[rolled out")


def test_window_policy_keeps_its_pinned_lines_and_charges_them_as_floor() -> None:
    rule = "constraint: never call the external web"
    text = "\n".join([rule] + [f"turn {i}: looked at channel {i}" for i in range(40)])
    plan = allocate([seg("chat", 10, "window", text=text, pinned_lines=(rule,)), seg("big", 990)], budget=120)
    chat = plan.get("chat")
    assert chat.text.split("\n")[0] == rule and chat.used <= chat.granted


def test_empty_text_is_kept_at_zero_cost() -> None:
    plan = allocate([seg("empty", 10, text="")], budget=10)
    a = plan.get("empty")
    assert (a.action, a.requested, a.used) == ("keep", 0, 0)


def test_naive_fills_in_order_and_hard_cuts_without_marker() -> None:
    segments = [seg("first", 1, text="a" * 200), seg("second", 100, text="b" * 200), seg("third", 100)]
    plan = allocate(segments, budget=70, reserve=30, naive=True)
    assert plan.mode == "naive" and plan.reserve == 0 and plan.cap == 70
    assert [a.action for a in plan.allocations] == ["keep", "hard_cut", "drop"]
    assert plan.get("second").text == "b" * 80 and "…" not in plan.get("second").text
    assert plan.used == 70 and plan.headroom == 0


def test_plan_items_build_a_valid_manifest() -> None:
    plan = allocate(fixture_segments(), budget=1200, reserve=240)
    items = [a.to_item(include_text=True) for a in plan.allocations]
    body = {
        "schema": SCHEMA_V1,
        "call_id": "c1",
        "run_id": "r1",
        "step": 0,
        "model": "m",
        "started_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "budget": msgspec.to_builtins(plan.to_budget()),
        "items": msgspec.to_builtins(items),
    }
    manifest, errors = convert_manifest(body)
    assert errors == [] and manifest is not None
    assert [i.action for i in manifest.items] == [a.action for a in plan.allocations]
    assert manifest.items[5].trust == "untrusted" and manifest.items[2].pinned is True


def test_two_hundred_segments_fit_the_cap() -> None:
    # Speed is measured in bench/sdk.py, never asserted here.
    segments = [seg(f"s{i}", 1 + i % 97, text=f"segment {i} says refund_rate=0.0{i}") for i in range(200)]
    plan = allocate(segments, budget=5000, reserve=1000)
    assert plan.used <= plan.cap
    assert all(a.used <= a.granted for a in plan.allocations)


def test_drop_segments_are_granted_whole_in_priority_order_instead_of_shared_to_nothing() -> None:
    # 2,050 equal-priority memories with policy drop (all or nothing) at budget 1500: proportional
    # shares of under one token each would buy nothing and drop them all, with 0 tokens used.
    notes = [seg(f"m{i:04d}", 50, "drop", text=f"memory {i}: the user wants amounts in yuan") for i in range(2050)]
    plan = allocate(notes, budget=1500)
    assert all(a.granted in (0, a.requested) for a in plan.allocations)  # never a share too small to use
    kept = [a for a in plan.allocations if a.action == "keep"]
    assert kept and [a.name for a in kept] == [f"m{i:04d}" for i in range(len(kept))]  # priority, then name order
    assert plan.used == sum(a.requested for a in kept) <= plan.cap
    assert plan.cap - plan.used < plan.get(f"m{len(kept):04d}").requested  # the next one would not have fit
    assert plan.starvation == {a.name: 1 for a in plan.allocations if a.action == "drop"}


def test_a_drop_segment_too_big_for_its_share_leaves_it_to_the_others() -> None:
    note = seg("note", 50, "drop", text="note: " + "the export job expires after 48 hours; " * 6)
    plan = allocate([seg("log", 50), note], budget=100)
    assert plan.get("note").action == "drop" and plan.get("note").granted == 0
    assert plan.get("log").granted == plan.cap == 100  # not the half it had while the note held the rest


def test_what_is_kept_between_calls_never_changes_a_plan(monkeypatch) -> None:
    history = "\n".join(f"turn {i}: 查询 app 渠道退款率" + (" error=429 retry_after=20s" if i % 7 == 0 else " ok")
                        for i in range(30))
    segments = [*fixture_segments(), seg("h1", 40, "summarize", text=history, keep_recent=2),
                seg("h2", 30, "extract", text=history + "\n" + history,
                    pinned_lines=("turn 3: 查询 app 渠道退款率 ok",))]
    words = lambda s: len(s.split()) + 1  # noqa: E731

    def plans(budgets: tuple[int, ...] = (300, 900, 1500, 5000)) -> list[dict]:
        return [allocate(segments, budget=b, reserve=b // 5, estimate=e).to_dict()
                for b in budgets for e in (estimate_tokens, words)]

    alloc_cache.clear()
    cold = plans()
    assert alloc_cache.stats()["facts"] > 0 and alloc_cache.stats()["plans"] > 0
    assert plans() == cold  # warm: the same plans
    alloc_cache.clear()  # each grant tighter than the one the kept plans were made for
    assert plans((5000, 1500, 900, 300)) == [*cold[6:], *cold[4:6], *cold[2:4], *cold[:2]]
    same_text = [*segments[:-2], seg("h1", 40, "summarize", text=history, keep_recent=5), segments[-1]]
    alloc_cache.clear()
    fresh = allocate(same_text, budget=1500, reserve=300).to_dict()
    alloc_cache.clear()
    allocate(segments, budget=1500, reserve=300)  # keeps a plan of the same text with keep_recent=2
    assert allocate(same_text, budget=1500, reserve=300).to_dict() == fresh
    monkeypatch.setattr(alloc_cache, "MAX_CHARS", 500)  # a cache that keeps evicting changes nothing either
    alloc_cache.clear()
    assert plans() == cold
    assert alloc_cache.stats()["facts_chars"] <= 500 and alloc_cache.stats()["plans_chars"] <= 500
