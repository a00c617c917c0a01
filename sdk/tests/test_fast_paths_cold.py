"""More of the allocator's cold-path fast paths (issue 12) against the straightforward definitions they replace."""

from __future__ import annotations

import json
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context import alloc_share, ops_dedupe, ops_schema, ops_truncate
from ctxkit.context.alloc_types import Allocation
from ctxkit.context.ops_extract import cut_lines, plan_extract, plan_summary
from ctxkit.context.ops_schema import (
    LazySchemaPlan,
    _first_sentence,
    _sentences,
    compress_schema,
    is_risky,
    plan_schema,
    risk_sentences,
)
from ctxkit.context.tokens import estimate_tokens, memo_estimator
from ctxkit.fixtures import TOOLS, TOOLS_SCHEMA

# Sentence ends (ASCII and CJK), spaces of several kinds, risk words and their near misses, word
# characters that could glue onto a risk word across a split.
_SENTENCE_PIECES = ["Delete", "delete", "deleted", "undeleted", "pays", "prod", "cannot be undone", "删除", "永久",
                    "Read it", "x", "_", "9", "é", " ", "  ", "\t", "\n", "\u3000", "\xa0", ".", "!", "?", ";",
                    "。", "！", "；", ". ", "; ", "a.b", "ſecrets", "\u212aey", "Ｄelete"]


@settings(max_examples=800, deadline=None)
@given(st.lists(st.sampled_from(_SENTENCE_PIECES), max_size=10))
def test_it_skips_the_sentence_split_only_when_no_sentence_is_risky(pieces: list[str]) -> None:
    text = "".join(pieces)
    sentences = _sentences(text)
    assert risk_sentences(text) == [s for s in sentences if is_risky(s)]
    if not is_risky(text):  # _short_with_risks' fast path: the first sentence alone
        assert _first_sentence(text) == (sentences[0] if sentences else text)
    kept = [sentences[0], *(s for s in sentences[1:] if is_risky(s))] if sentences else []
    assert ops_schema._short_with_risks(text) == (" ".join(kept) if kept else text)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.sampled_from('ab"\\\x00\x1f\x7f\n\t\u2028é退\U0001f600\ud800/'), max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(alphabet=st.sampled_from('k"\\\n退\ud800'), max_size=3), inner, max_size=4),
    max_leaves=12,
)


def _holds_float(value: object) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_holds_float(v) for v in value.values())
    return isinstance(value, list) and any(_holds_float(v) for v in value)


@settings(max_examples=500, deadline=None)
@given(_JSON_VALUES)
def test_it_renders_parsed_schemas_as_json_dumps_does(value: object) -> None:
    text = json.dumps([{"v": value}])
    tools, floats = ops_schema._parse_tools(text)
    assert tools is not None
    assert floats == _holds_float(tools)
    assert ops_schema._compact(tools, floats) == json.dumps(tools, ensure_ascii=False, separators=(",", ":"))


def test_it_knows_which_blocks_casefold_leaves_alone_for_this_unicode() -> None:
    assert ops_dedupe._caseless_table() == ops_dedupe._caseless_blocks()


# CJK text's usual characters (the fast fold), and each kind that must send it down the general path:
# cased letters past ASCII, Latin-1, whitespace other than spaces and line feeds, U+2028, astral.
_FOLD_ALPHABET = "ab AB\n\n退款，：。—…ＡＢ\u3000\u2003\u2028\u2029\x85\xa0\t\x1fßΣİ\u212a\U00020000ǅ\u2126"


@settings(max_examples=600, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(_FOLD_ALPHABET), max_size=24), max_size=8),
       st.lists(st.booleans(), min_size=8, max_size=8))
def test_it_keys_cjk_texts_through_their_utf8_as_one_by_one(texts: list[str], wants: list[bool]) -> None:
    wants = wants[: len(texts)]
    for text, want, (key, rep) in zip(texts, wants, ops_dedupe.keys_and_repeats(texts, wants), strict=True):
        assert key == ops_dedupe._digest(" ".join(ops_dedupe._fold(text).split()))
        assert rep == (ops_dedupe.line_repeats(text) if want else None)
    for text in texts:  # the fast fold, where it answers, is casefold's
        folded = ops_dedupe._nfkc(text)
        fast = ops_dedupe._plain_caseless_utf8(folded)
        if fast is not None:
            assert fast == folded.casefold().encode() and ops_dedupe._spaces_only(folded)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["退款率 3：按季度", "error=429 retry", "", "金额 100 元\uff0c", "plain line",
                                 "不得访问外网", "x" * 30]), min_size=1, max_size=8),
       st.integers(min_value=0, max_value=80), st.sampled_from([None, "web#3", "网页#3"]),
       st.sampled_from([plan_extract, plan_summary]))
def test_it_cuts_a_line_plan_by_arithmetic_as_by_counting(
    lines: list[str], budget: int, ref: str | None, make: object
) -> None:
    def counted(piece: str) -> int:  # the same counts, not recognised as the default estimator
        return estimate_tokens(piece)

    text = "\n".join(lines)
    fast = cut_lines(make(text, estimate=memo_estimator()), budget, ref=ref, estimate=memo_estimator())  # type: ignore[operator]
    slow = cut_lines(make(text, estimate=counted), budget, ref=ref, estimate=counted)  # type: ignore[operator]
    assert (fast[0], fast[1].to_dict()) == (slow[0], slow[1].to_dict())


def _share_reference(pool: int, others: list[Allocation]) -> None:
    """alloc_share.share as it was written first: sort keys as tuples, the last tokens by order_key."""
    weighted = [a for a in others if a.requested > a.granted and a.effective_priority > 0]
    unweighted = [a for a in others if a.requested > a.granted and a.effective_priority <= 0]
    for group, equal in ((weighted, False), (unweighted, True)):
        if pool <= 0 or not group:
            continue
        needs = [a.requested - a.granted for a in group]
        if sum(needs) <= pool:
            for a, need in zip(group, needs, strict=True):
                a.granted += need
            pool -= sum(needs)
            continue
        weights = [1] * len(group) if equal else [a.effective_priority for a in group]
        level_pool, level_weight = pool, sum(weights)
        keys = [(n / w, -a.effective_priority, a.name) for n, w, a in zip(needs, weights, group, strict=True)]
        by_ratio = sorted(range(len(group)), key=keys.__getitem__)
        unsaturated: list[int] = []
        for rank, i in enumerate(by_ratio):
            if needs[i] * level_weight <= level_pool * weights[i]:
                group[i].granted += needs[i]
                level_pool -= needs[i]
                level_weight -= weights[i]
            else:
                unsaturated = by_ratio[rank:]
                break
        handed = 0
        for i in unsaturated:
            add = level_pool * weights[i] // level_weight
            group[i].granted += add
            handed += add
        for a in sorted((group[i] for i in unsaturated), key=alloc_share.order_key)[: level_pool - handed]:
            a.granted += 1
        pool = 0 if unsaturated else level_pool


@settings(max_examples=400, deadline=None)
@given(st.integers(min_value=0, max_value=400),
       st.lists(st.tuples(st.integers(0, 5), st.integers(0, 60), st.integers(0, 20)), max_size=12))
def test_it_shares_a_pool_as_the_first_written_water_filling_does(
    pool: int, specs: list[tuple[int, int, int]]
) -> None:
    def allocs() -> list[Allocation]:
        return [Allocation(f"s{k % 3}{k}", "history", "truncate", prio, prio, False, "trusted", None, None, k,
                           need, need, granted=min(granted, need)) for k, (prio, need, granted) in enumerate(specs)]

    fast, slow = allocs(), allocs()
    alloc_share.share(pool, fast)
    _share_reference(pool, slow)
    assert [a.granted for a in fast] == [a.granted for a in slow]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=700), min_size=1, max_size=12),
       st.sampled_from([TOOLS, json.dumps(TOOLS_SCHEMA[:2]), json.dumps([{"name": "f", "x": 1.5e16}]),
                        "not json\nat all"]))
def test_a_lazy_schema_plan_cuts_at_budgets_in_any_order_as_the_operator(budgets: list[int], text: str) -> None:
    plan = LazySchemaPlan(text, estimate_tokens(text))
    for budget in budgets:  # one plan, rendered further only when a budget needs it
        assert plan.cut(text, budget, memo_estimator()) == compress_schema(text, budget)


def test_a_lazy_schema_plan_shared_by_threads_renders_each_step_once() -> None:
    budgets = list(range(0, estimate_tokens(TOOLS) + 5, 3))
    expected = {b: compress_schema(TOOLS, b) for b in budgets}
    for _ in range(20):
        plan = LazySchemaPlan(TOOLS, estimate_tokens(TOOLS))
        results: dict[int, object] = {}

        def cut(mine: list[int], plan: LazySchemaPlan = plan, results: dict[int, object] = results) -> None:
            for b in mine:
                results[b] = plan.cut(TOOLS, b, memo_estimator())

        threads = [threading.Thread(target=cut, args=(budgets[k::4][::-1] if k % 2 else budgets[k::4],))
                   for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == expected
        assert len(plan._rendered) == 7 and [s[0] for s in plan._rendered] == [
            s[0] for s in plan_schema(TOOLS).steps or ()]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(" \t\n\u3000\xa0\u2028{[a退"), max_size=8))
def test_it_finds_where_a_stripped_text_starts_as_lstrip_does(text: str) -> None:
    assert ops_truncate._first_char(text) == text.lstrip()[:1]
