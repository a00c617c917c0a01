"""The allocator's fast paths (issue 12, cold path) give exactly what their reference gives."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context import alloc_cache, ops_dedupe, readback
from ctxkit.context.allocator import Segment, allocate
from ctxkit.context.ops_extract import LinePlan, cut_lines, plan_extract, plan_summary
from ctxkit.context.ops_schema import RISK, is_risky
from ctxkit.context.ops_truncate import truncate_head_tail
from ctxkit.context.readback import KeyField, read_back
from ctxkit.context.tokens import count_cjk, count_cjk_lines, count_cjk_many, estimate_tokens, memo_estimator

# Every character str.split() treats as whitespace, plus CJK, fullwidth, control and astral ones.
_SPACES = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
_ALPHABET = _SPACES + "ab  \n\n退款，：Ａß\x00\u200b\uffe5\ufff5\U00020000\u4dc0\u31f5…"


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(_ALPHABET), max_size=40))
def test_it_counts_cjk_per_line_as_count_cjk_does_line_by_line(text: str) -> None:
    lines = text.split("\n")
    assert count_cjk_lines(text, lines) == tuple(count_cjk(line) for line in lines)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(_ALPHABET), max_size=40))
def test_it_normalizes_whitespace_as_split_and_join_do(text: str) -> None:
    folded = ops_dedupe._fold(text)
    assert ops_dedupe.normalize(text) == " ".join(folded.split())
    lines = text.split("\n")
    assert ops_dedupe._line_forms(folded, lines) == [" ".join(ops_dedupe._fold(line).split()) for line in lines]
    key, _, _ = ops_dedupe.key_and_repeats(text)
    assert key == ops_dedupe.content_key(text)


def test_it_sees_tabs_and_other_ascii_spaces_in_a_key() -> None:
    # The ASCII fast check must not take "a\tb" for "a b" with a single space: both collapse alike.
    assert ops_dedupe.content_key("a\tb\x1fc") == ops_dedupe.content_key("a b c")
    assert not ops_dedupe._spaces_only("a\tb")
    assert ops_dedupe._spaces_only("a b\nc")


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
        record = a.operations[-1]
        assert record.to_dict() == expected.to_dict()


def test_it_finds_a_key_field_in_every_output_that_carries_it_once_per_output() -> None:
    outputs = {
        "a": "status=ok",
        "b": "error code=429\nerror code=429\nretry 429",
        "c": "",
        "d": "x4290 is not it",
        "e": "429",
    }
    fields = [KeyField("rate limit", "429", source="e"), KeyField("none", "503")]
    first, missing = read_back(fields, outputs)
    assert (first.present, first.found_in) == (True, "e")
    assert (missing.present, missing.found_in) == (False, None)
    (other,) = read_back([KeyField("rate limit", "429")], outputs)
    assert other.found_in == "b"  # the first output carrying it, in the outputs' order


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(_ALPHABET + "ΣσςİK\u212a\uff0c\u3000"), max_size=30), max_size=8,
                unique=True))  # a text given twice gets its line dedupe if either asks: checked below
def test_it_works_out_many_texts_facts_as_it_does_one_by_one(texts: list[str]) -> None:
    # The batch path (one fold, one CJK scan over all the new texts) against the per-text one.
    wants = [k % 2 == 0 for k in range(len(texts))]
    assert count_cjk_many(texts) == [count_cjk(text) for text in texts]
    assert ops_dedupe.keys_and_repeats(texts, wants) == [
        (key, (out, removed) if want else None)
        for text, want in zip(texts, wants, strict=True)
        for key, out, removed in [ops_dedupe.key_and_repeats(text)]
    ]
    alloc_cache.clear()
    many = alloc_cache.facts_many(texts, wants)
    alloc_cache.clear()
    assert many == [alloc_cache.facts(text, want) for text, want in zip(texts, wants, strict=True)]
    assert alloc_cache.facts_many(texts, wants) == many  # and from the cache


def test_it_works_out_a_text_given_twice_once_with_its_line_dedupe() -> None:
    alloc_cache.clear()
    text = "same line, long enough\nsame line, long enough"
    first, second = alloc_cache.facts_many([text, text], [False, True])
    assert first is second and first == alloc_cache.facts(text, True)
    assert first.repeats == ("same line, long enough", [[2, 1]])


def test_it_counts_texts_with_u_fffx_characters_one_by_one() -> None:
    # U+FFF0-FFFF share the fullwidth block's high byte but are not CJK; U+FF0C is.
    texts = ["\uff0c\ufff9ab", "退款\uff0c", "\ufffd", "x\uff0c"]
    assert count_cjk_many(texts) == [1, 3, 0, 1]
    assert count_cjk_many(texts[1:2] + texts[3:]) == [3, 1]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("a1 4290\x00退款"), max_size=40), st.sampled_from(["429", "a", "退款", "0 4"]),
       st.integers(min_value=0, max_value=40))
def test_it_finds_a_key_field_where_the_regex_search_would(text: str, literal: str, start: int) -> None:
    norm, pattern = readback._pattern(literal)
    match = pattern.search(text, start)
    assert readback._search(norm, pattern, text, start) == (match.start() if match else -1)


def test_it_sees_u_fffx_characters_in_long_and_short_texts() -> None:
    for size in (10, 5000):
        text = "退款，" * size
        assert count_cjk(text + "\ufff9") == count_cjk(text) == 3 * size
        assert count_cjk_lines(text + "\ufffd", [text + "\ufffd"]) == (3 * size,)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab =\n429"), min_size=1, max_size=300), st.integers(min_value=1, max_value=90),
       st.sampled_from([None, "log#3"]), st.booleans(), st.sampled_from([0.55, 0.1, 0.5, 0.9]))
def test_it_truncates_ascii_text_by_arithmetic_as_the_counting_path_does(
    text: str, budget: int, ref: str | None, marked: bool, head_ratio: float
) -> None:
    def counted(piece: str) -> int:  # the same counts, not recognised as the default estimator
        return estimate_tokens(piece)

    if marked:  # a text cut before: its marker is summed, not repeated
        text, _ = truncate_head_tail(text * 3, max(1, budget * 2), ref=ref)
    fast_text, fast = truncate_head_tail(text, budget, ref=ref, head_ratio=head_ratio, estimate=memo_estimator())
    slow_text, slow = truncate_head_tail(text, budget, ref=ref, head_ratio=head_ratio, estimate=counted)
    assert (fast_text, fast.to_dict()) == (slow_text, slow.to_dict())


_RISK_PIECES = ["Delete", "DROP", "pays", "Pii", "prod", "Production", "cannot be undone", "can't BE undone",
                "sends an EMail", "send e-mails", "costly", "Wipes", "transfer funds", "Irreversibly", "x", "a",
                "_", "9", " ", ".", "-", "'", "ſecrets", "prıvate", "\u212aey", "删除", "Ｄelete"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_RISK_PIECES), max_size=8))
def test_it_finds_risk_wording_as_the_case_insensitive_pattern_does(pieces: list[str]) -> None:
    sentence = "".join(pieces)
    assert is_risky(sentence) == (RISK.search(sentence) is not None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["退款率 3：按季度", "error=429 retry", "", "  ", "金额 100 元\uff0c",
                                          "\ufff9x", "\U00020000字", "plain line", "不得访问外网"]),
                         min_size=1, max_size=6), min_size=1, max_size=6),
       st.sampled_from([(), ("plain line",), ("不得访问外网", "error=429 retry")]), st.integers(0, 3))
def test_it_makes_line_plans_with_a_shared_line_memo_as_without(
    texts: list[list[str]], pinned: tuple[str, ...], keep_recent: int
) -> None:
    # One call's memo of line CJK counts, shared by many plans, against a plan made alone; and the
    # plan built slot by slot against the dataclass's own constructor.
    line_cjk: dict[str, int] = {}
    for lines in texts:
        text = "\n".join(lines)
        for make, kwargs in ((plan_extract, {}), (plan_summary, {"keep_recent": keep_recent})):
            shared = make(text, pinned=pinned, estimate=memo_estimator(), line_cjk=line_cjk, **kwargs)
            alone = make(text, pinned=pinned, estimate=estimate_tokens, **kwargs)
            assert shared == alone
            assert alone == LinePlan(*(getattr(alone, name) for name in LinePlan.__dataclass_fields__))
            assert shared.cjk == tuple(count_cjk(line) for line in lines)
            assert shared.costs == tuple(estimate_tokens(lines[n] + "\n") for n in shared.order)
