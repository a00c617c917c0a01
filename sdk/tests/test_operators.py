"""Operators, safest first: dedupe, near-dedupe, extract, summarize, ref, truncate, window, schema."""

from __future__ import annotations

import itertools
import json
import re
import unicodedata

import msgspec
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxkit.context import operators
from ctxkit.context.operators import (
    MARKER_RE,
    OpRecord,
    compress_schema,
    content_key,
    dedupe_items,
    dedupe_lines,
    extract_lines,
    jaccard_5gram,
    merge_near_duplicate_lines,
    merge_near_duplicates,
    near_duplicate_pairs,
    normalize,
    ref_replace,
    score_line,
    sliding_window,
    summarize_lines,
    truncate_head_tail,
)
from ctxkit.context.operators.dedupe import key_and_repeats, line_repeats
from ctxkit.context.operators.extract import cut_lines, plan_extract, plan_summary
from ctxkit.context.operators.schema import cut_schema, plan_schema
from ctxkit.context.tokens import estimate_tokens, memo_estimator
from ctxkit.fixtures import TOOLS, TOOLS_SCHEMA

LOG = "\n".join(
    ["HEAD: GET /refund status=200 refund_rate=0.0321"]
    + [f"debug: row {i} scanned, nothing interesting here at all" for i in range(40)]
    + ["TAIL: status=error code=429 retry_after=20s"]
)


# --------------------------------------------------------------------------- #
# exact dedupe


def test_normalize_folds_width_case_and_whitespace() -> None:
    assert normalize("（ＡＢＣ）\t Def\n\u3000x ") == "(abc) def x"
    assert content_key("Hello   World") == content_key("hello world\n")
    assert content_key("hello world") != content_key("hello, world")
    assert len(content_key("x")) == 16


# Text where the fast paths matter: fullwidth punctuation, odd whitespace, combining marks, line feeds.
MESSY = "aB z\n\t\r\x0b\x1c\xa0\u2028\u3000，：；（）！？％Ａｂ退e\u0301ﬁßſΣ…"
messy_text = st.text(alphabet=st.sampled_from(list(MESSY)), max_size=80)


@given(messy_text)
def test_normalize_and_the_content_key_match_their_definition(text: str) -> None:
    normal = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    assert normalize(text) == normal
    lines = text.split("\n")
    norms = [" ".join(unicodedata.normalize("NFKC", line).casefold().split()) for line in lines]
    expected: list[list[int]] = []
    first: dict[str, int] = {}
    for number, norm in enumerate(norms, start=1):
        if len(norm) >= 16 and norm in first:
            expected.append([number, first[norm]])
        elif len(norm) >= 16:
            first[norm] = number
    dropped = {pair[0] for pair in expected}
    out = "\n".join(line for n, line in enumerate(lines, start=1) if n not in dropped)
    assert line_repeats(text) == (out, expected)
    assert key_and_repeats(text) == (content_key(text), out, expected)
    assert dedupe_lines(text)[0] == out


@given(messy_text.map(lambda t: t.replace("\n", " ")))
def test_repeated_lines_are_found_through_width_case_and_spacing(line: str) -> None:
    padded = line + " long enough to count as a line"
    variant = "\t " + "".join(c.upper() if c.isascii() else c for c in padded).replace(" ", "\u3000 ")
    assert normalize(variant) == normalize(padded)
    out, removed = line_repeats("\n".join([padded, variant, "other line, also long enough"]))
    assert removed == [[2, 1]] and out == padded + "\nother line, also long enough"


def test_dedupe_lines_removes_repeats_and_keeps_the_first_and_short_lines() -> None:
    text = "© 2024 Example Corp. All rights reserved.\n}\nbody line\n}\n©  2024 EXAMPLE corp. All rights reserved."
    out, rec = dedupe_lines(text)
    assert out == "© 2024 Example Corp. All rights reserved.\n}\nbody line\n}"
    assert rec.data["removed"] == [[5, 1]]
    assert rec.tokens_before - rec.tokens_after == estimate_tokens(text) - estimate_tokens(out) > 0
    assert dedupe_lines("a\nb")[0] == "a\nb"


def test_dedupe_items_keeps_the_first_id() -> None:
    kept, dup, rec = dedupe_items([("a", "Same text"), ("b", "other"), ("c", "same   TEXT")])
    assert kept == ["a", "b"] and dup == {"c": "a"} and rec.tokens_after == 2


# --------------------------------------------------------------------------- #
# near duplicates


def test_jaccard_of_5gram_shingles() -> None:
    a = "退款率 = 退款单数 / 支付单数，按自然季度统计，不含测试订单。"
    b = "退款率 = 退款单数 / 支付单数，按自然季度统计，不含测试订单与内部订单。"
    assert jaccard_5gram(a, a) == 1.0
    assert 0.75 <= jaccard_5gram(a, b) < 1.0
    assert jaccard_5gram(a, "completely different text here") == 0.0
    assert jaccard_5gram("abc", "abc") == 0.0  # shorter than one shingle: no evidence of similarity


@st.composite
def variants(draw: st.DrawFn) -> list[str]:
    """A few edited copies of one base text (near duplicates) plus unrelated texts."""
    alphabet = "abcdefgh "
    base = draw(st.text(alphabet=alphabet, min_size=6, max_size=40))
    texts = []
    for _ in range(draw(st.integers(min_value=0, max_value=8))):
        chars = list(base)
        for _ in range(draw(st.integers(min_value=0, max_value=4))):
            chars[draw(st.integers(min_value=0, max_value=len(chars) - 1))] = draw(st.sampled_from(alphabet))
        texts.append("".join(chars))
    texts += draw(st.lists(st.text(alphabet=alphabet, max_size=24), max_size=4))
    return draw(st.permutations(texts))


@settings(max_examples=300, deadline=None)
@given(variants(), st.sampled_from([0.5, 0.6, 0.75, 0.8, 0.9]))
def test_prefix_filtered_pairs_equal_brute_force(texts: list[str], threshold: float) -> None:
    brute = [
        (i, j, round(jaccard_5gram(texts[i], texts[j]), 4))
        for i, j in itertools.combinations(range(len(texts)), 2)
        if jaccard_5gram(texts[i], texts[j]) >= threshold
    ]
    assert near_duplicate_pairs(texts, threshold) == brute


def test_near_duplicates_are_merged_with_both_sources_not_deleted() -> None:
    items = [
        ("log#1", "2024-10-08 09:12:01 web_fetch failed: HTTP 429 Too Many Requests, retry_after=20s"),
        ("log#2", "unrelated line about the refund dashboard refresh schedule"),
        ("log#3", "2024-10-08 09:12:31 web_fetch failed: HTTP 429 Too Many Requests, retry_after=20s"),
    ]
    merged, rec = merge_near_duplicates(items)
    assert [m.id for m in merged] == ["log#1", "log#2"]
    assert merged[0].sources == ("log#1", "log#3")
    assert merged[0].similarity["log#3"] >= 0.75
    assert rec.data["merged"]["log#3"]["into"] == "log#1"


def test_near_duplicate_merge_does_not_chain_through_a_merged_item() -> None:
    base = "the quick brown fox jumps over the lazy dog near the river bank"
    a, b, c = base + " alpha", base[8:] + " alpha beta", base[16:] + " alpha beta gamma"
    assert jaccard_5gram(a, b) >= 0.75 and jaccard_5gram(b, c) >= 0.75 and jaccard_5gram(a, c) < 0.75
    merged, _ = merge_near_duplicates([("a", a), ("b", b), ("c", c)])
    assert [m.id for m in merged] == ["a", "c"]


def test_near_duplicate_lines_leave_a_visible_note() -> None:
    text = "常见问题：退款率 = 退款单数 / 支付单数，按自然季度统计，不含测试订单。\nother\n" \
           "常见问题：退款率 = 退款单数 / 支付单数，按自然季度统计，不含测试订单与内部订单。"
    out, rec = merge_near_duplicate_lines(text)
    lines = out.split("\n")
    assert len(lines) == 2 and "[near-duplicate of line(s) 3 merged here]" in lines[0]
    assert rec.tokens_after < rec.tokens_before


# --------------------------------------------------------------------------- #
# extraction and extractive summary


def test_score_line_rewards_numbers_negations_units_refs_failures_and_key_values() -> None:
    assert score_line("just some words") == 0
    assert score_line("limit 30") == 5
    assert score_line("禁止外网") == 4
    assert score_line("you must not") == 4
    assert score_line("单位为「分」") == 3
    assert score_line("see a/b") == 2
    assert score_line("see https://x.example") == 4
    assert score_line("request failed") == 3
    assert score_line("k=v") == 2
    assert score_line("error code=429 after 20s, must not retry") == 5 + 4 + 3 + 3 + 2


_CONSTRAINT_WORDS = re.compile(
    r"\b(must|never|only|not|no|don't|do not|cannot|can't|forbidden|required|at least|at most|without)\b", re.I
)
_UNIT_WORDS = re.compile(r"\d\s*(s|sec|secs|seconds|min|minutes|h|hours|kb|mb|gb|usd|cents?)\b", re.I)
_URI = re.compile(r"[a-z][a-z0-9+.-]*://\S", re.I)


def reference_score(line: str) -> int:
    """score_line's definition, check by check (score_line folds them into fewer scans)."""
    low = line.lower()
    return (5 * any(c.isdigit() for c in line)
            + 4 * bool(any(h in line for h in operators.CONSTRAINT_HINTS) or _CONSTRAINT_WORDS.search(line))
            + 3 * bool(any(u in low for u in operators.UNIT_HINTS) or _UNIT_WORDS.search(line))
            + 2 * ("://" in line or "/" in line) + 2 * bool(_URI.search(line))
            + 3 * any(h in low for h in operators.FAIL_HINTS) + 2 * ("=" in line))


words = st.sampled_from(["must", "MUST", "muſt", "no", "don't", "at least", "3 s", "5 SEC", "7ſec", "²", "٣ h",
                         "KB", "\u212aB", "bi://x", "a / b", "HTTP://Z", "1://", "failed", "TIMED OUT", "e_x",
                         "不得", "超时", "分钟", "％", "%", "token", "k=v", " ", "x", "\t"])


@given(st.lists(words, max_size=8).map("".join))
@example("muſt go")
@example("7ſec")
@example("٣ h")
@example("5 \u212aB")
@example("ſ://x")
@example("KB:3")
def test_score_line_matches_its_definition(line: str) -> None:
    assert score_line(line) == reference_score(line)
    assert operators.is_failure_line(line) == any(h in line.lower() for h in operators.FAIL_HINTS)


def test_extract_keeps_high_scoring_lines_in_order_with_a_marker() -> None:
    filler = "this line is only filler prose without any signal in it at all"
    text = "\n".join([filler, "金额单位必须为「分」", filler, "refund_rate=0.0321", filler])
    out, rec = extract_lines(text, 40, ref="doc#1")
    lines = out.split("\n")
    assert lines[:2] == ["金额单位必须为「分」", "refund_rate=0.0321"]
    assert lines[-1].startswith("…[extracted 2/5 lines; omitted") and "ref=doc#1" in lines[-1]
    assert estimate_tokens(out) <= 40 and rec.tokens_after == estimate_tokens(out)
    assert rec.data["kept_lines"] == [2, 4]


def test_extract_fills_leftover_room_with_lower_scoring_lines_in_original_order() -> None:
    text = "intro\n金额单位必须为「分」\n" + "filler words " * 12 + "\nrefund_rate=0.0321\nbye"
    out, _ = extract_lines(text, 45, ref="doc#1")
    assert out.split("\n")[:-1] == ["intro", "金额单位必须为「分」", "refund_rate=0.0321", "bye"]


def test_extract_returns_the_marker_alone_only_when_it_carries_a_ref() -> None:
    text = "refund_rate=0.0321 " * 20 + "\n" + "status=error code=429 " * 20
    assert extract_lines(text, 22)[0] == ""
    only, _ = extract_lines(text, 22, ref="doc#1")
    assert only.startswith("…[extracted 0/2 lines") and "ref=doc#1" in only


def test_extract_keeps_pinned_lines_before_higher_scoring_ones() -> None:
    text = "\n".join([f"metric_{i}=0.{i}321 must stay under 30 ms" for i in range(6)] + ["keep me verbatim"])
    out, _ = extract_lines(text, 40, pinned=["keep me verbatim"])
    assert "keep me verbatim" in out.split("\n")
    assert extract_lines("short", 10)[0] == "short"


@given(st.text(alphabet="ab1不/=\n ", max_size=300), st.integers(min_value=0, max_value=60))
def test_extract_and_summarize_respect_the_budget(text: str, budget: int) -> None:
    assert estimate_tokens(extract_lines(text, budget)[0]) <= budget
    assert estimate_tokens(summarize_lines(text, budget)[0]) <= budget


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab1不/=\n 退，…", max_size=200), st.sampled_from([None, "log#1", "退款"]),
       st.sampled_from([(), ("ab",)]), st.integers(min_value=0, max_value=4))
def test_a_line_plan_cut_at_any_budget_equals_the_operator(text: str, ref, pinned, keep_recent: int) -> None:
    # The allocator keeps plans across calls and cuts them at each call's grant.
    words = lambda s: len(s.split()) + 1  # noqa: E731
    for estimate in (estimate_tokens, memo_estimator(), words):
        extract = plan_extract(text, pinned=pinned, estimate=estimate)
        summary = plan_summary(text, keep_recent=keep_recent, pinned=pinned, estimate=estimate)
        for budget in range(0, 50, 4):
            assert cut_lines(extract, budget, ref=ref, estimate=estimate) == extract_lines(
                text, budget, ref=ref, pinned=pinned, estimate=estimate)
            assert cut_lines(summary, budget, ref=ref, estimate=estimate) == summarize_lines(
                text, budget, keep_recent=keep_recent, ref=ref, pinned=pinned, estimate=estimate)


def test_summary_keeps_failure_evidence_and_recent_turns() -> None:
    history = "\n".join(
        ["user: please compute the refund rate"]
        + [f"assistant: step {i} went fine and produced nothing notable" for i in range(10)]
        + ["tool: web_fetch failed with HTTP 429"]
        + [f"assistant: continuing the analysis, chapter {i}" for i in range(10)]
        + ["user: summarize now", "assistant: working on it"]
    )
    out, rec = summarize_lines(history, 60, keep_recent=2, ref="session#1")
    lines = out.split("\n")
    assert lines[0].startswith("[summary: ") and "ref=session#1" in lines[0]
    assert "tool: web_fetch failed with HTTP 429" in lines
    assert lines[-2:] == ["user: summarize now", "assistant: working on it"]
    assert estimate_tokens(out) <= 60 and "failure-evidence" in rec.detail


# --------------------------------------------------------------------------- #
# reference replacement


def test_ref_replace_emits_a_resolvable_coordinate() -> None:
    text = "def f():\n    return 1\n" * 50
    out, rec = ref_replace(text, ref="src/agent/loop.py", lines="118-146", why="budget check to change")
    payload = json.loads(out)
    assert payload == {"kind": "ref", "ref": "src/agent/loop.py", "lines": "118-146", "sha256": content_key(text),
                       "tokens": estimate_tokens(text), "why": "budget check to change"}
    assert rec.tokens_after < rec.tokens_before / 5
    assert json.loads(ref_replace("a\nb", ref=None)[0])["ref"] == "sha256:" + content_key("a\nb")


# --------------------------------------------------------------------------- #
# head/tail truncation


def test_truncation_keeps_head_and_tail_and_marks_the_middle() -> None:
    out, rec = truncate_head_tail(LOG, 60, ref="log#sha256:4be1")
    assert out.startswith("HEAD: GET /refund status=200 refund_rate=0.0321")
    assert out.endswith("TAIL: status=error code=429 retry_after=20s")
    marker = MARKER_RE.search(out)
    assert marker is not None and marker.group(2) == "log#sha256:4be1"
    assert int(marker.group(1)) == rec.data["omitted_tokens"] > 0
    assert estimate_tokens(out) <= 60


def test_truncation_is_idempotent_and_never_stacks_markers() -> None:
    once, _ = truncate_head_tail(LOG, 80, ref="r")
    assert truncate_head_tail(once, 80, ref="r")[0] == once
    twice, _ = truncate_head_tail(once, 50)
    assert len(MARKER_RE.findall(twice)) == 1
    assert "ref=r;" in twice  # the ref of the first cut is carried over
    assert int(MARKER_RE.search(twice).group(1)) > int(MARKER_RE.search(once).group(1))
    assert estimate_tokens(twice) <= 50


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="abc \n", max_size=200) | st.text(alphabet="ab \n{}[]…退", max_size=200),
       st.integers(min_value=0, max_value=80))
def test_truncation_computes_for_ascii_what_the_search_finds(text: str, budget: int) -> None:
    # Cuts of ASCII text are computed, not searched, with the default estimator or a memo of it.
    for candidate in (text, "a" * 100 + text, "status=ok " * 20 + text, "row\n" * 30 + text):
        searched = truncate_head_tail(candidate, budget, ref="log#1", estimate=lambda s: estimate_tokens(s))
        assert truncate_head_tail(candidate, budget, ref="log#1") == searched
        assert truncate_head_tail(candidate, budget, ref="log#1", estimate=memo_estimator()) == searched


def test_head_ratio_is_adjustable() -> None:
    head_heavy, _ = truncate_head_tail(LOG, 120, head_ratio=0.8)
    tail_heavy, _ = truncate_head_tail(LOG, 120, head_ratio=0.2)
    m1, m2 = MARKER_RE.search(head_heavy), MARKER_RE.search(tail_heavy)
    assert m1.start() > m2.start()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400), st.integers(min_value=0, max_value=80))
def test_truncation_respects_any_budget(text: str, budget: int) -> None:
    out, rec = truncate_head_tail(text, budget, ref="r")
    assert estimate_tokens(out) <= budget
    assert rec.tokens_after == estimate_tokens(out)
    if estimate_tokens(text) <= budget:
        assert out == text


def test_json_truncation_keeps_status_fields_and_stays_valid_json() -> None:
    payload = {
        "rows": [{"channel": f"c{i}", "refund_rate": 0.03 + i / 1000, "note": "x" * 40} for i in range(50)],
        "ok": False,
        "error": "rate limited (429)",
        "status": 429,
        "result_ref": "bi://refund/v2#page=3",
    }
    out, rec = truncate_head_tail(json.dumps(payload, indent=2), 80, ref="tool#7")
    value = json.loads(out)
    assert value["ok"] is False and value["error"] == "rate limited (429)" and value["status"] == 429
    assert value["result_ref"] == "bi://refund/v2#page=3"
    assert value["_truncated"]["ref"] == "tool#7" and value["_truncated"]["omitted_tokens"] > 0
    assert estimate_tokens(out) <= 80 and rec.data["json"] is True
    assert truncate_head_tail(out, 80)[0] == out  # idempotent


def test_json_list_truncation_keeps_a_list_with_one_marker_element() -> None:
    rows = [{"channel": f"c{i}", "refund_rate": 0.03 + i / 1000} for i in range(40)]
    out, _ = truncate_head_tail(json.dumps(rows), 60, ref="bi#rows")
    value = json.loads(out)
    assert isinstance(value, list) and value[0] == rows[0]
    assert value[-1].startswith(f"…[omitted {40 - (len(value) - 1)} items, ") and value[-1].endswith("ref=bi#rows]")
    again, _ = truncate_head_tail(out, 40)
    again_value = json.loads(again)
    assert sum(isinstance(x, str) for x in again_value) == 1
    assert again_value[-1].endswith("ref=bi#rows]") and estimate_tokens(again) <= 40


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=40),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=8) | st.lists(json_values, max_size=8),
       st.integers(min_value=0, max_value=120))
def test_json_truncation_never_emits_half_a_json(value, budget: int) -> None:
    out, _ = truncate_head_tail(json.dumps(value), budget)
    assert estimate_tokens(out) <= budget
    if out:
        json.loads(out)


# --------------------------------------------------------------------------- #
# sliding window


def test_sliding_window_pins_constraints_and_summarizes_what_rolled_out() -> None:
    turns = [f"turn {i}: nothing special happened" for i in range(10)]
    turns[2] = "turn 2: bi_query failed with 429"
    out, rec = sliding_window(turns, max_turns=3, pinned=["约束：禁止外网"])
    lines = out.split("\n")
    assert lines[0] == "约束：禁止外网"
    assert lines[1].startswith("[rolled out 7 earlier turns") and "429" in lines[1]
    assert lines[2:] == turns[-3:]
    assert rec.data == {"kept_turns": 3, "rolled_out": 7}


def test_sliding_window_fits_its_budget_and_keeps_the_newest_turns() -> None:
    turns = [f"turn {i}: " + "word " * 10 for i in range(30)]
    out, _ = sliding_window(turns, budget=80, pinned=["pinned rule"])
    assert estimate_tokens(out) <= 80
    assert out.endswith(turns[-1]) and out.startswith("pinned rule")
    assert sliding_window(turns, budget=3, pinned=["pinned rule"])[0] == "pinned rule"


# --------------------------------------------------------------------------- #
# tool schema compression


def test_schema_compression_keeps_names_and_required_parameters() -> None:
    names = [t["function"]["name"] for t in TOOLS_SCHEMA]
    budget = estimate_tokens(TOOLS) // 2
    out, rec = compress_schema(TOOLS, budget)
    assert estimate_tokens(out) <= budget and all(n in out for n in names)
    assert "dataset" in out and "sql" in out
    signatures, rec = compress_schema(TOOLS, 60)
    assert estimate_tokens(signatures) <= 60
    assert signatures.split("\n")[0] == "bi_query(sql: string, dataset: string)"
    assert rec.data["steps"][-1] == "dropped optional parameters"


def test_schema_compression_drops_trailing_tools_last_and_says_so() -> None:
    out, rec = compress_schema(TOOLS, 30)
    assert estimate_tokens(out) <= 30 and out.startswith("bi_query(")
    assert rec.data["dropped_tools"][-1] == "fetch_ref"


def test_schema_compression_understands_anthropic_tools_and_enums() -> None:
    tools = [{"name": "set_mode", "description": "Set the mode. Long explanation follows here.",
              "input_schema": {"type": "object", "properties": {
                  "mode": {"type": "string", "enum": ["fast", "safe"], "description": "which"}},
                  "required": ["mode"]}}]
    out, _ = compress_schema(json.dumps(tools, indent=4), 20)
    assert out == 'set_mode(mode: "fast"|"safe") - Set the mode.'


def test_a_schema_plan_cut_at_any_budget_equals_the_operator() -> None:
    for text in (TOOLS, json.dumps(TOOLS_SCHEMA[:2]), "not json\nat all"):
        plan = plan_schema(text)
        for budget in range(0, estimate_tokens(text) + 5, 7):
            assert cut_schema(plan, text, budget) == compress_schema(text, budget)


def test_a_schema_plan_made_for_a_least_budget_cuts_as_the_operator_from_it_on() -> None:
    for text in (TOOLS, json.dumps(TOOLS_SCHEMA[:2]), "not json\nat all"):
        for least in range(1, estimate_tokens(text) + 5, 11):
            plan = plan_schema(text, least_budget=least)
            assert plan.least_budget <= least
            assert plan.steps is None or len(plan.steps) <= len(plan_schema(text).steps or ())
            for budget in range(plan.least_budget, estimate_tokens(text) + 5, 7):
                assert cut_schema(plan, text, budget) == compress_schema(text, budget)
            if plan.least_budget:
                with pytest.raises(ValueError):
                    cut_schema(plan, text, plan.least_budget - 1)


def test_op_records_stay_immutable_values_that_share_no_mutable_data() -> None:
    one, two = OpRecord("dedupe", 10, 8), OpRecord("dedupe", 10, 8)
    assert one == two and one.data == {}
    assert OpRecord(op="x", tokens_before=1, tokens_after=0, detail="d", data={"k": 1}).data == {"k": 1}
    with pytest.raises(AttributeError):
        one.op = "changed"  # type: ignore[misc]
    with pytest.raises(TypeError):  # a record made without data gets a read-only mapping: none is shared
        one.data["k"] = 1  # type: ignore[index]
    assert two.data == {} and msgspec.structs.replace(one, detail="x") == OpRecord("dedupe", 10, 8, "x")
    assert json.loads(json.dumps(one.to_dict())) == {"op": "dedupe", "tokens_before": 10, "tokens_after": 8,
                                                     "detail": "", "data": {}}


def test_the_operators_module_still_exports_everything_it_did_before_the_split() -> None:
    before = {"SAFE_ORDER", "OpRecord", "normalize", "content_key", "dedupe_lines", "dedupe_items", "shingles",
              "jaccard_5gram", "near_duplicate_pairs", "Merged", "merge_near_duplicates", "merge_near_duplicate_lines",
              "FAIL_HINTS", "CONSTRAINT_HINTS", "UNIT_HINTS", "score_line", "is_failure_line", "extract_lines",
              "summarize_lines", "ref_replace", "MARKER_RE", "truncate_head_tail", "sliding_window", "compress_schema"}
    assert before <= set(operators.__all__) and all(hasattr(operators, name) for name in before)


def test_schema_compression_falls_back_to_extraction_for_non_json() -> None:
    out, rec = compress_schema("tool a: does x\n" * 30 + "tool b: must not run after 18:00", 40)
    assert rec.op == "extract" and "must not run after 18:00" in out


def test_compact_json_renders_json_without_spaces_and_takes_any_json_value() -> None:
    from ctxkit.context.operators.truncate import compact_json

    tools = json.loads(TOOLS)
    assert compact_json(tools) == json.dumps(tools, ensure_ascii=False, separators=(",", ":"))
    assert compact_json({"退款": ["分", 1.5, None, True]}) == '{"退款":["分",1.5,null,true]}'
    assert compact_json([float("nan"), float("inf")]) == "[null,null]"  # JSON has neither
    # What msgspec cannot encode still renders, as json.dumps does.
    assert compact_json({"s": "\ud800"}) == '{"s":"\ud800"}'
    assert compact_json({True: 1, 2: "x"}) == '{"true":1,"2":"x"}'
