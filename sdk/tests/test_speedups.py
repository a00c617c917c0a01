"""The optional C accelerator of the first-seen text facts (ctxkit._speedups, via text_native)
against the pure-Python path it stands in for: the same facts, the same plans and manifests, and
the pure path taking over where the module is absent or switched off."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit import Segment, allocate, build_manifest
from ctxkit.context import alloc_cache, text_native
from ctxkit.context.ops_dedupe import content_key, key_and_repeats
from ctxkit.context.tokens import _CJK, count_cjk

# ASCII (letters of both cases, JSON openers, every kind of ASCII whitespace, control characters),
# CJK and kana, fullwidth forms (letters fold to ASCII), the spaces NFKC makes ASCII (U+3000,
# U+2003, U+00A0), U+2028 (whitespace NFKC keeps), cased non-ASCII, Latin-1, astral characters, a
# combining mark, compatibility forms that are not one ASCII character, lone surrogates.
_PIECES = ["a", "B", "z", "0", "{", "[", " ", "  ", "\n", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x00",
           "\x07", "\x85", "退款", "率", "。", "、", "「", "ア", "が",
           "か\u3099", "\uff0c", "\uff21", "\uff41", "\uff5b",
           "\u3000", "\u2003", "\xa0", "\u2028", "\u2029", "\u2014", "\u2026", "é", "É", "ß", "Σ", "ς", "İ", "\u212a",
           "\xb2", "\xaa", "\U00020000", "\U0001f600", "\u0301", "\ufb01", "\uff66", "\ud800", "\udfff", "\u200b",
           "\ufff9", "\uffe0", "가", "\u1100", "\u3131", "tool=x row=1 status=ok", "同一行，足够长的内容。"]
_texts = st.lists(st.sampled_from(_PIECES), max_size=24).map("".join)
# Lines from a small pool, so that lines repeat (line dedupe with removals), some of them long.
_LINES = ["", " ", "short", "a line that is long enough", "A LINE THAT IS  LONG ENOUGH ",
          "同一行，足够长的内容。重复一下吧",
          "同一行,足够长的内容。重复一下吧", "\uff21 line that is long enough", "tool=bi row=1 status=ok code=429",
          "\u3000tool=bi row=1 status=ok code=429", "{\"k\": 1}", "退款", "é line that is long enough"]
_multiline = st.lists(st.sampled_from(_LINES), min_size=1, max_size=12).map("\n".join)


@pytest.fixture(scope="module")
def both_paths() -> Iterator[None]:
    """The module is built here; the tests switch it on and off (each sets the switch it needs)."""
    assert text_native.available(), "ctxkit._speedups is not built: `pip install -e sdk` (make) builds it"
    previous = text_native.use_native(True)
    yield
    text_native.use_native(previous)
    alloc_cache.clear()


def _facts(texts: list[str], wants: list[bool], native: bool) -> list[alloc_cache.TextFacts]:
    text_native.use_native(native)
    alloc_cache.clear()
    return alloc_cache.facts_many(texts, wants)


def _definition(text: str, want: bool) -> alloc_cache.TextFacts:
    """TextFacts straight from the definitions (one text, no batch, no fast path of facts_many)."""
    json_like = text.lstrip()[:1] in ("{", "[")
    if want and not json_like:
        key, out, removed = key_and_repeats(text)
        return alloc_cache.TextFacts(key, count_cjk(text), json_like, (out, removed), count_cjk(out) if removed else 0)
    return alloc_cache.TextFacts(content_key(text), count_cjk(text), json_like)


@settings(max_examples=600, deadline=None)
@given(st.lists(st.one_of(_texts, _multiline), max_size=10), st.randoms(use_true_random=False))
def test_native_facts_equal_the_pure_python_facts(both_paths: None, texts: list[str], rnd: random.Random) -> None:
    wants = [rnd.random() < 0.7 for _ in texts]
    if any("\ud800" <= c <= "\udfff" for text in texts for c in text):
        # A lone surrogate has no UTF-8 form to hash: the Python path raises; C leaves such texts to it.
        for native in (True, False):
            with pytest.raises(UnicodeEncodeError):
                _facts(texts, wants, native)
        return
    native = _facts(texts, wants, True)
    assert native == _facts(texts, wants, False)
    either = {text: any(w for t, w in zip(texts, wants, strict=True) if t == text) for text in texts}
    assert native == [_definition(text, either[text]) for text in texts]  # a text given twice: one entry
    for f in native:  # the same types too (a bool is an int: == alone would not see it)
        assert type(f) is alloc_cache.TextFacts and type(f.json_like) is bool and type(f.cjk) is int


@settings(max_examples=400, deadline=None)
@given(st.one_of(_texts, _multiline), st.booleans())
def test_the_module_handles_exactly_what_its_table_covers(both_paths: None, text: str, want: bool) -> None:
    text_native.use_native(True)
    made, rest = text_native.text_facts([text], [want], alloc_cache.TextFacts)  # raises on nothing: C hashes none
    flags, _ = text_native.table()
    handled = all(ord(c) < 65536 and flags[ord(c)] & text_native.HANDLED for c in text)
    assert (text in made) is handled and (rest == [text]) is not handled
    if handled:  # (a lone surrogate is never handled: its text would raise in _definition)
        size, facts = made[text]
        assert size == len(text) + 1 and facts == _definition(text, want)


def test_a_text_given_twice_gets_its_line_dedupe_and_the_cache_answers_after(both_paths: None) -> None:
    text_native.use_native(True)
    text = ("same line, long enough\nsame line, long enough\n"
            "退款，同一行足够长的内容，再长一些\n退款,同一行足够长的内容,再长一些")
    first, second = _facts([text, text], [False, True], True)
    assert first is second and first == _definition(text, True)
    assert first.repeats == ("same line, long enough\n退款，同一行足够长的内容，再长一些", [[2, 1], [4, 3]])
    assert first.deduped_cjk == count_cjk(first.repeats[0])
    assert alloc_cache.facts_many([text], [True]) == [first]  # from the cache, not made again
    astral = "\U00020000 line that is long enough\n\U00020000 line that is long enough"
    assert _facts([astral, text], [True, True], True) == [_definition(astral, True), first]  # C and Python mixed


def test_keys_hashed_by_the_cpu_and_by_hashlib_equal_hashlib_s(both_paths: None) -> None:
    # Every length up to three blocks (the padding takes one or two blocks) and some longer ones;
    # by the CPU's SHA extensions where it has them (sha_ni() is then True) and through hashlib.
    from ctxkit import _speedups

    text_native.use_native(True)
    text_native._configure(alloc_cache.TextFacts)
    rnd = random.Random(5)
    data = [bytes(rnd.randrange(256) for _ in range(n)) for n in [*range(200), 1000, 4095, 4096, 70_000]]
    expected = [hashlib.sha256(d).hexdigest()[:16] for d in data]
    had = _speedups.sha_ni()
    try:
        for on in (True, False):
            assert _speedups.sha_ni(on) is (on and had)
            assert [_speedups.key(d) for d in data] == expected
            texts = ["同一行，足够长的内容。\nrow=1", "ascii  text\n\nmore", ""]
            assert _facts(texts, [True] * 3, True) == [_definition(text, True) for text in texts]
    finally:
        _speedups.sha_ni(had)


def test_the_built_in_table_is_the_one_worked_out_from_the_unicode_database() -> None:
    # The runs kept for Unicode 14.0.0 (Python 3.11) against build_table; under another version
    # table() is build_table itself.
    assert text_native.table() == text_native.build_table()
    if unicodedata.unidata_version == "14.0.0":
        assert text_native.table("14.0.0") == text_native.build_table()


def test_every_handled_character_folds_on_its_own() -> None:
    """What lets C fold a text character by character: each handled character's NFKC + casefold is
    itself or one ASCII character, it is no mark, and no canonical composition takes it second
    (so nothing composes across two handled characters); its CJK and whitespace flags are right."""
    seconds = {0x1161 + k for k in range(21)} | {0x11A8 + k for k in range(27)}  # hangul V and T jamo
    for c in range(0x110000):
        decomposition = unicodedata.decomposition(chr(c))
        if decomposition and not decomposition.startswith("<") and len(decomposition.split()) == 2:
            seconds.add(int(decomposition.split()[1], 16))
    flags, image = text_native.table()
    for c in range(65536):
        f, ch = flags[c], chr(c)
        if not f & text_native.HANDLED:
            continue
        folded = unicodedata.normalize("NFKC", ch).casefold()
        assert folded == (chr(image[c]) if f & text_native.TO_ASCII else ch), hex(c)
        assert c not in seconds and not unicodedata.combining(ch), hex(c)
        assert bool(f & text_native.CJK) == bool(_CJK.match(ch)), hex(c)
        assert bool(f & text_native.SPACE) == ch.isspace(), hex(c)
        assert bool(f & text_native.FOLDS_TO_SPACE) == folded.isspace(), hex(c)
        assert folded != "\n" or ch == "\n", hex(c)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([c for c in _PIECES if len(c) == 1]), min_size=2, max_size=6))
def test_handled_characters_normalize_one_by_one(chars: list[str]) -> None:
    flags, _ = text_native.table()
    chars = [c for c in chars if ord(c) < 65536 and flags[ord(c)] & text_native.HANDLED]
    assert unicodedata.normalize("NFKC", "".join(chars)) == "".join(unicodedata.normalize("NFKC", c) for c in chars)


T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _candidates(n: int, seed: int) -> list[Segment]:
    """An agent context like bench/sdk.py's: history, tool results, retrieved chunks (repeated
    lines), memory; Chinese and English; a few texts only the Python path handles."""
    rnd = random.Random(seed)
    segs = [Segment(name="system", kind="system", text="You are a careful analyst. 不得访问外网。", priority=100,
                    policy="pin"),
            Segment(name="task", kind="task", text="Compute the refund rate by channel for Q3.", priority=95,
                    policy="pin")]
    chunks = [f"退款率 口径说明 {k}：按自然季度统计，金额单位为分，数据源 bi://refund/v{k % 3}。" for k in range(6)]
    chunks += ["Ünïcode café chunk, cased non-ASCII", "astral \U0001f600 chunk that is long enough"]
    for i in range(n):
        kind = ("history", "history", "tool_result", "retrieval", "memory")[i % 5]
        if kind == "history":
            text = f"{'user' if i % 2 else 'assistant'}: step {i} — " + rnd.choice(
                ["查询 app 渠道退款率", "error=HTTP 429 retry_after=20s", "换算为元：金额除以 100", "ok, continue",
                 "{\"retry\": true}"]) + " " + "detail " * rnd.randrange(5, 40)
            seg = Segment(name=f"turn-{i}", kind=kind, text=text, priority=20 + i // 8, policy="summarize")
        elif kind == "tool_result":
            lines = [f"tool=bi_query row={j} channel={rnd.choice(['app', 'web'])} refund_rate={rnd.random():.4f} "
                     f"status={rnd.choice(['ok', 'ok', 'error code=429'])}" for j in range(rnd.randrange(4, 30))]
            lines += lines[: rnd.randrange(0, 3)]  # repeated lines
            seg = Segment(name=f"tool-{i}", kind=kind, text="\n".join(lines), priority=rnd.randrange(10, 60),
                          policy="truncate", trust="untrusted", source_ref=f"log#{i}")
        elif kind == "retrieval":
            text = "\n".join(rnd.choice(chunks) for _ in range(rnd.randrange(2, 10)))
            seg = Segment(name=f"doc-{i}", kind=kind, text=text, priority=rnd.randrange(20, 70), policy="extract",
                          trust="untrusted", source_ref=f"web#{i}")
        else:
            seg = Segment(name=f"mem-{i}", kind=kind, text=f"记忆 {i}: 用户偏好 {rnd.random():.3f}；不得访问外网。",
                          priority=rnd.randrange(30, 80), policy="drop")
        segs.append(seg)
    return segs


@pytest.mark.parametrize("seed", [1, 7])
@pytest.mark.parametrize("budget", [400_000, 12_000, 3_000])
def test_plans_and_manifests_are_identical_with_and_without_the_accelerator(both_paths: None, seed: int,
                                                                            budget: int) -> None:
    segs = _candidates(120, seed)
    out = []
    for native in (True, False):
        text_native.use_native(native)
        alloc_cache.clear()
        plan = allocate(segs, budget=budget, reserve=budget // 5)
        manifest = build_manifest(call_id="c", run_id="r", step=0, model="m", plan=plan, started_at=T0)
        out.append((plan, msgspec.json.encode(manifest)))
    (native_plan, native_manifest), (python_plan, python_manifest) = out
    assert native_plan == python_plan
    assert native_manifest == python_manifest


_PROBE = """
import sys
from ctxkit.context import alloc_cache, text_native
texts = ["退款\\uff0c率 row=1\\nrow=1 line long enough!\\nrow=1 line long enough!", "ascii only", "\\U0001f600"]
print(text_native.available(), text_native.enabled(), alloc_cache.facts_many(texts, [True, True, False]))
"""


# A meta-path finder that makes ``import ctxkit._speedups`` fail, as on a machine without a compiler.
_BLOCK = """
import importlib.abc, sys
class NoSpeedups(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "ctxkit._speedups":
            raise ImportError("not built")
        return None
sys.meta_path.insert(0, NoSpeedups())
"""


def _run(code: str, **env: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, **env})
    return done.stdout.strip()


def test_without_the_module_or_with_the_switch_the_pure_path_gives_the_same_facts() -> None:
    native = _run(_PROBE, CTXKIT_PURE_PYTHON="0")
    absent = _run(_BLOCK + _PROBE)
    switched_off = _run(_PROBE, CTXKIT_PURE_PYTHON="1")
    assert native.startswith("True True ")
    assert absent.startswith("False False ")
    assert switched_off.startswith("True False ")
    assert native.split(" ", 2)[2] == absent.split(" ", 2)[2] == switched_off.split(" ", 2)[2]
    assert "[[3, 2]]" in native  # the repeated line was found
