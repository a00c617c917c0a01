"""The allocator's per-text facts: content keys, line forms and CJK counts worked out for many
texts at once (or from one scan of a text) equal their one-text definitions."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context.allocator import cache as alloc_cache
from ctxkit.context.operators import dedupe as ops_dedupe
from ctxkit.context.tokens import count_cjk, count_cjk_lines, count_cjk_many

# Every character str.split() treats as whitespace, plus CJK, fullwidth, control and astral ones.
_SPACES = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
_ALPHABET = _SPACES + "ab  \n\n退款，：Ａß\x00\u200b\uffe5\ufff5\U00020000\u4dc0\u31f5…"
# Characters casefold or NFKC change (cased letters past ASCII, fullwidth, compatibility spaces).
_FOLD_ALPHABET = "ab AB\n\n退款，：。—…ＡＢ\u3000\u2003\u2028\u2029\x85\xa0\t\x1fßΣİ\u212a\U00020000ǅ\u2126"


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
    simple = ops_dedupe._normal_form(folded)[1]
    assert ops_dedupe._line_forms(text, folded, simple) == [" ".join(ops_dedupe._fold(line).split()) for line in lines]
    key, _, _ = ops_dedupe.key_and_repeats(text)
    assert key == ops_dedupe.content_key(text)


def test_it_sees_tabs_and_other_ascii_spaces_in_a_key() -> None:
    # "a\tb" must not be taken for text whose only whitespace is spaces: both collapse alike.
    assert ops_dedupe.content_key("a\tb\x1fc") == ops_dedupe.content_key("a b c")
    assert not ops_dedupe._spaces_only("a\tb")
    assert ops_dedupe._spaces_only("a b c") and ops_dedupe._spaces_only("退款 a")
    assert not ops_dedupe._spaces_only("退款\u3000a")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(_ALPHABET + "ΣσςİK\u212a\uff0c\u3000"), max_size=30), max_size=8,
                unique=True))  # a text given twice gets its line dedupe if either asks: checked below
def test_it_works_out_many_texts_facts_as_it_does_one_by_one(texts: list[str]) -> None:
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


@settings(max_examples=600, deadline=None)
@given(st.lists(st.text(alphabet=st.sampled_from(_FOLD_ALPHABET), max_size=24), max_size=8),
       st.lists(st.booleans(), min_size=8, max_size=8))
def test_it_keys_texts_folded_together_as_one_by_one(texts: list[str], wants: list[bool]) -> None:
    wants = wants[: len(texts)]
    for text, want, (key, rep) in zip(texts, wants, ops_dedupe.keys_and_repeats(texts, wants), strict=True):
        assert key == ops_dedupe._digest(" ".join(ops_dedupe._fold(text).split()))
        assert rep == (ops_dedupe.line_repeats(text) if want else None)


def test_it_keys_a_text_holding_the_separator_on_its_own() -> None:
    for texts in (["a\x00b", "退款 a"], ["退\x00款", "退款 a", "Ａ\x00"]):
        assert ops_dedupe.keys_and_repeats(texts, [True, False, True][: len(texts)]) == [
            (ops_dedupe.content_key(text), ops_dedupe.line_repeats(text) if want else None)
            for text, want in zip(texts, [True, False, True], strict=False)]


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


def test_it_sees_u_fffx_characters_in_long_and_short_texts() -> None:
    for size in (10, 5000):
        text = "退款，" * size
        assert count_cjk(text + "\ufff9") == count_cjk(text) == 3 * size
        assert count_cjk_lines(text + "\ufffd", [text + "\ufffd"]) == (3 * size,)
