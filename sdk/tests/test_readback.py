"""Key-field read-back and its manifest Evidence."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from ctxkit.context.readback import KeyField, format_readback, read_back, summarize, to_evidence
from ctxkit.manifest import SCHEMA_V1, Evidence, Item, convert_manifest

FIELDS = [
    KeyField("rate limit", "429", "history", key="rate_limit"),
    KeyField("refund rate", "0.0321", "tool_result", key="refund_rate"),
    KeyField("unit", "单位必须为「分」", "task"),
]


def test_it_reports_present_fields_and_the_item_that_carries_them() -> None:
    outputs = {"task": "金额单位必须为「分」。", "history": "tool failed: 429", "tool_result": ""}
    results = read_back(FIELDS, outputs)
    assert [(r.present, r.found_in) for r in results] == [(True, "history"), (False, None), (True, "task")]


def test_it_prefers_the_expected_source_but_finds_the_field_elsewhere() -> None:
    outputs = {"system": "status 429", "history": "error 429"}
    [rate] = read_back(FIELDS[:1], outputs)
    assert rate.found_in == "history"
    [moved] = read_back(FIELDS[:1], {"system": "status 429", "task": "nothing"})
    assert moved.present and moved.found_in == "system"


def test_numbers_do_not_match_inside_longer_numbers() -> None:
    outputs = {"tool_result": "rows=14290 rate=0.03215", "history": "code=4290"}
    assert [r.present for r in read_back(FIELDS[:2], outputs)] == [False, False]
    outputs = {"tool_result": "rate=0.0321.", "history": "(429)"}
    assert [r.present for r in read_back(FIELDS[:2], outputs)] == [True, True]


def test_matching_ignores_width_case_and_line_wrapping() -> None:
    fields = [KeyField("flag", "partial=true", "task"), KeyField("limit", "30 秒", "task")]
    outputs = {"task": "PARTIAL＝TRUE；每次查询必须在 30\n   秒内完成"}
    assert all(r.present for r in read_back(fields, outputs))
    assert not read_back(fields[1:], {"task": "300 秒"})[0].present


def test_an_empty_literal_is_refused() -> None:
    with pytest.raises(ValueError):
        read_back([KeyField("empty", "  ")], {"a": "x"})


def test_summary_and_table_name_the_missing_fields() -> None:
    results = read_back(FIELDS, {"history": "429"})
    assert summarize(results) == "1/3 kept; missing: refund rate, unit"
    table = format_readback(results)
    assert "[OK  ] rate limit" in table and "@history" in table
    assert "[MISS] refund rate" in table and "@tool_result" in table
    assert table.endswith("read-back: 1/3 kept; missing: refund rate, unit")


def test_results_become_manifest_evidence_that_validates() -> None:
    results = read_back(FIELDS, {"history": "429", "task": "单位必须为「分」", "tool_result": "cut"})
    evidence = to_evidence(results)
    assert evidence[0] == Evidence(key="rate_limit", label="rate limit", literal="429", expected_item="history",
                                   present=True, found_in="history")
    assert evidence[2].key == "unit"  # key defaults to the label
    items = [Item(id=name, kind="history", action="keep", requested_tokens=1) for name in
             ("history", "task", "tool_result")]
    body = {
        "schema": SCHEMA_V1, "call_id": "c1", "run_id": "r1", "step": 0, "model": "m",
        "started_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(), "budget": {"window": 1000},
        "items": msgspec.to_builtins(items), "evidence": msgspec.to_builtins(evidence),
    }
    manifest, errors = convert_manifest(body)
    assert errors == []
    assert manifest is not None and [e.present for e in manifest.evidence] == [True, False, True]


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
