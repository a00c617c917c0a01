"""More of the allocator's cold-path fast paths (issue 12) against the straightforward definitions they replace."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxkit.context import ops_schema
from ctxkit.context.ops_schema import _first_sentence, _sentences, is_risky, risk_sentences

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
