"""The allocator's fast paths (issue 12, cold path) give exactly what their reference gives."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context import alloc_cache, ops_dedupe
from ctxkit.context.allocator import Segment, allocate
from ctxkit.context.ops_extract import cut_lines, plan_extract, plan_summary
from ctxkit.context.readback import KeyField, read_back
from ctxkit.context.tokens import count_cjk, count_cjk_lines, memo_estimator

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
