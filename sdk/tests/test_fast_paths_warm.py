"""The warm call's fast paths (issue 12: allocate + build_manifest) against what they replace."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit import build_manifest, figures
from ctxkit.context import alloc_share, ops_truncate
from ctxkit.context.alloc_types import Allocation
from ctxkit.context.allocator import Segment, allocate, priority_order
from ctxkit.context.tokens import estimate_tokens

_TEXT = st.text(alphabet=st.sampled_from("ab 退\n…{[\t"), max_size=8)
_DATA = st.dictionaries(st.sampled_from(["kept_lines", "omitted_tokens", "ref"]),
                        st.integers() | st.none() | st.lists(st.integers(), max_size=3), max_size=3)


def _allocs(specs: list[tuple[int, int, int, bool]], policy: str = "truncate") -> list[Allocation]:
    """Allocations of distinct names (some sharing a prefix, so names tie-break in depth)."""
    return [Allocation(f"s{k % 3}{k}", "history", "drop" if policy == "mixed" and k % 2 else "truncate",
                       prio, prio + aged, pinned, "trusted", None, None, k, need, need, granted=min(need, k))
            for k, (prio, need, aged, pinned) in enumerate(specs)]


_SPECS = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 60), st.integers(0, 3), st.booleans()), max_size=14)


@settings(max_examples=400, deadline=None)
@given(_SPECS)
def test_the_priority_order_is_the_tuple_sort(specs: list[tuple[int, int, int, bool]]) -> None:
    allocs = _allocs(specs)
    expected = sorted(allocs, key=lambda a: (not a.pinned, -a.effective_priority, a.name))
    assert [a.name for a in priority_order(allocs)] == [a.name for a in expected]


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=0, max_value=400), _SPECS, st.sampled_from(["truncate", "mixed"]))
def test_sharing_an_ordered_list_gives_what_the_full_sort_gives(pool: int, specs: list[tuple[int, int, int, bool]],
                                                                policy: str) -> None:
    # The allocator's others: not pinned, in order_key order. share(ordered=False) sorts by the full key
    # (it is tested against the first-written water filling in test_fast_paths_cold).
    fast = sorted((a for a in _allocs(specs, policy) if not a.pinned), key=alloc_share.order_key)
    slow = sorted((a for a in _allocs(specs, policy) if not a.pinned), key=alloc_share.order_key)
    alloc_share.share(pool, fast, ordered=True)
    alloc_share.share(pool, slow)
    assert [a.granted for a in fast] == [a.granted for a in slow]
    alloc_share.whole_or_nothing(fast, ordered=True)
    alloc_share.whole_or_nothing(slow)
    assert [a.granted for a in fast] == [a.granted for a in slow]


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(" \t\n\u3000\xa0{[]}ab\"1"), max_size=6))
def test_it_tells_json_like_text_as_the_first_character_does(text: str) -> None:
    first = ops_truncate._first_char(text)
    assert ops_truncate._may_be_json(text) == (not first or first in "{[")


# Segments of every policy, one-line turns (dropped without a line plan on a tight budget) among them.
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
def test_an_allocation_with_the_default_estimator_is_the_one_without_its_fast_paths(
    segments: list[Segment], budget: int
) -> None:
    # estimate_tokens behind a lambda counts the same but is not recognised as the default: every cut
    # is then searched and counted, the one-line turns go through a line plan and cut_lines.
    fast = allocate(segments, budget=budget)
    slow = allocate(segments, budget=budget, estimate=lambda text: estimate_tokens(text))
    assert [a.to_dict() for a in fast.allocations] == [a.to_dict() for a in slow.allocations]


@settings(max_examples=150, deadline=None)
@given(st.lists(_SEGMENT, max_size=10, unique_by=lambda s: s.name), st.integers(1, 300),
       st.dictionaries(st.sampled_from([f"seg-{k}" for k in range(5)]), st.integers(1, 3)))
def test_manifest_items_record_what_the_allocations_say(segments: list[Segment], budget: int,
                                                       aging: dict[str, int]) -> None:
    plan = allocate(segments, budget=budget, aging=aging)
    manifest = build_manifest(call_id="c", run_id="r", step=0, model="m", plan=plan)
    position = 0
    for a, item in zip(plan.allocations, manifest.items, strict=True):
        assert item.allocation == a.replay_settings()
        text = "" if not figures.kept_by(a.action) else a.text
        present = figures.in_context(item) and bool(text or item.used_tokens)
        assert item.position == (position if present else None)
        assert item.text == (text if present and text else None)
        position += present
