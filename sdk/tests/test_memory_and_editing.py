"""Memory write-back with supersedes and clearing thinking blocks."""

from __future__ import annotations

import pytest

from ctxkit import ContextBuilder, Memory, Record, Segment, build_manifest, clear_thinking
from ctxkit.context.compaction import clear_tool_results


def test_a_newer_fact_supersedes_the_older_and_the_manifest_records_which() -> None:
    """Report.language en -> zh, appended with supersedes, never overwritten in place."""
    memory = Memory()
    old = memory.write("report.language", "en", authority="preference", source="mem:2026-09", fact_id="mem_7f31")
    new = memory.write("report.language", "zh", authority="user", source="user:turn-8")
    assert new.supersedes == "mem_7f31" and new.previous == "en"
    assert memory.current() == [new] and memory.facts == [old, new]  # the old value is kept for audit
    built = ContextBuilder(budget=2000).build([Segment(name="system", kind="system", text="规则。", policy="pin"),
                                               *memory.segments()])
    assert "report.language: zh" in built.text() and "report.language: en" not in built.text()
    manifest = memory.record(built.manifest(call_id="c", run_id="r", step=0, model="m"))
    items = {i.id: i for i in manifest.items}
    assert items[new.id].supersedes == "mem_7f31" and items[new.id].action != "drop"
    assert items["mem_7f31"].action == "drop" and f"superseded by {new.id}" in items["mem_7f31"].reason
    assert "'en' -> 'zh'" in items["mem_7f31"].reason


def test_explicit_supersedes_and_the_authority_order() -> None:
    """A long-term preference does not override the current user's explicit instruction."""
    memory = Memory()
    user = memory.write("report.language", "zh", authority="user", source="user:turn-8")
    stale = memory.write("report.language", "en", authority="preference", source="mem:profile")
    assert stale.conflicts_with == user.id and stale.supersedes is None
    assert memory.current_fact("report.language") == user
    tool = memory.write("refund.rate", "0.028", authority="tool", source="bi://refund/v1")
    fixed = memory.write("refund.rate", "0.0321", authority="tool", source="bi://refund/v2", supersedes=tool.id)
    assert fixed.supersedes == tool.id and memory.current_fact("refund.rate") == fixed
    manifest = memory.record(build_manifest(call_id="c", run_id="r", step=0, model="m", window=1000))
    reasons = {i.id: i.reason for i in manifest.items}
    assert "outranks" in reasons[stale.id] and f"superseded by {fixed.id}" in reasons[tool.id]
    with pytest.raises(ValueError, match="inference"):
        memory.write("refund.rate", "0.03", authority="inference")


def _history() -> list[Record]:
    out = []
    for turn in range(4):
        out.append(Record(id=f"u{turn}", role="user", text=f"第 {turn} 步：继续查询", turn=turn))
        out.append(Record(id=f"think{turn}", role="assistant", kind="thinking", turn=turn,
                          text=f"思考 {turn}：" + "先看 app 渠道的数据，再对比 web 渠道，注意单位是分。" * 8))
        out.append(Record(id=f"a{turn}", role="assistant", text=f"第 {turn} 步完成", turn=turn))
    return out


def test_old_thinking_blocks_are_cleared_and_recorded_as_a_context_edit() -> None:
    """Context editing clears stale tool results / thinking blocks, no summary."""
    history = _history()
    result = clear_thinking(history, keep_last=1)
    assert result.applied and result.cleared_ids == ["think0", "think1", "think2"] and result.kept == 1
    by_id = {r.id: r for r in result.records}
    assert by_id["think3"].text == history[10].text  # the last turn's thinking stays
    assert "[cleared thinking block: ref=think0" in by_id["think0"].text
    assert history[1].cleared is False  # the caller's records are untouched
    edit = result.to_manifest()
    assert edit.type == "clear_thinking" and edit.cleared_count == 3 and edit.cleared_tokens == result.cleared_tokens
    tools = clear_tool_results([Record(id="t", role="tool", text="x " * 400), Record(id="t2", role="tool", text="y")],
                               keep_last=1)
    manifest = build_manifest(call_id="c", run_id="r", step=0, model="m", window=8000,
                              edits=[result, tools], records=result.records)
    assert [e.type for e in manifest.context_edits] == ["clear_thinking", "clear_tool_uses"]
    cleared = {i.id: i for i in manifest.items}
    assert cleared["think0"].action == "clear" and "thinking block" in cleared["think0"].reason
    assert cleared["think0"].requested_tokens > 50


def test_clearing_thinking_respects_clear_at_least() -> None:
    """Clearing breaks the cache prefix, so it only acts when it frees enough."""
    result = clear_thinking(_history(), keep_last=1, clear_at_least=10_000)
    assert not result.applied and "below clear_at_least" in result.reason
