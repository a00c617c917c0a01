"""Line hashes of prefix segments, as ctxkit's layout and builder record them."""

from __future__ import annotations

import msgspec

from ctxkit import ContextBuilder, Segment
from ctxkit.context.layout import Block, arrange
from ctxkit.context.prefix_lines import line_hash, line_hashes, prefix_segment
from ctxkit.manifest import MAX_LINES, convert_manifest


def system(time: str) -> str:
    return f"You are the refund analyst.\nRules apply.\nCurrent time: {time}"


def test_the_layout_records_one_hash_per_line_and_the_text():
    first = arrange([Block(id="s", kind="system", text=system("12:47"))]).to_prefix()
    second = arrange([Block(id="s", kind="system", text=system("12:48"))]).to_prefix()
    a, b = first.segments[0], second.segments[0]
    assert a.lines == [line_hash(x) for x in system("12:47").split("\n")] and len(a.lines) == 3
    assert a.lines[:2] == b.lines[:2] and a.lines[2] != b.lines[2]
    assert a.text == system("12:47")
    assert arrange([Block(id="s", kind="system", text="x")]).to_prefix(include_text=False).segments[0].text is None


def test_tool_data_is_a_line_of_its_own():
    layout = arrange([Block(id="t", kind="tools", text="bi_query", data={"name": "bi_query", "x": 1})])
    assert layout.to_prefix().segments[0].text == 'bi_query\n{"name":"bi_query","x":1}'


def test_a_long_segment_keeps_within_the_limit_and_the_last_hash_covers_the_rest():
    text = "\n".join(str(n) for n in range(MAX_LINES + 50))
    hashes = line_hashes(text)
    assert len(hashes) == MAX_LINES
    changed = line_hashes(text[:-2] + "xx")
    assert hashes[:-1] == changed[:-1] and hashes[-1] != changed[-1]
    segment = prefix_segment(name="s", hash="h", tokens=1, text=text, include_text=True)
    body = {"schema": "ctxview.manifest/v1", "call_id": "c", "run_id": "r", "step": 0, "model": "m",
            "started_at": "2026-12-01T00:00:00Z", "budget": {"window": 10},
            "prefix": {"hash": "h", "segments": [msgspec.to_builtins(segment)]}}
    manifest, errors = convert_manifest(body)
    assert errors == [] and manifest.prefix.segments[0].lines == hashes


def test_the_builder_withholds_segment_text_when_it_redacts_or_excludes_text():
    segments = [Segment(name="system", kind="system", text=system("12:47"), policy="pin")]
    built = ContextBuilder(budget=2000, reserve=0).build(segments)
    kept = built.manifest(call_id="c1", run_id="r", step=0, model="m")
    withheld = built.manifest(call_id="c2", run_id="r", step=0, model="m", include_text=False)
    redacted = built.manifest(call_id="c3", run_id="r", step=0, model="m", redact=lambda text, item: text)
    assert kept.prefix.segments[0].text == system("12:47") and len(kept.prefix.segments[0].lines) == 3
    assert withheld.prefix.segments[0].text is None
    assert withheld.prefix.segments[0].lines == kept.prefix.segments[0].lines
    assert redacted.prefix.segments[0].text is None
