"""Memory write-back with supersedes and clearing thinking blocks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest

from ctxkit import ContextBuilder, Memory, Record, Segment, build_manifest, clear_thinking
from ctxkit.context.compaction import clear_tool_results
from ctxkit.context.memory import Fact


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


def test_a_fact_carries_the_write_back_records_confidence() -> None:
    """The write-back record: key, value, previous, source, observed_at, supersedes, confidence."""
    memory = Memory()
    memory.write("report.language", "en", authority="preference", source="mem:profile", fact_id="mem_7f31")
    new = memory.write("report.language", "zh", authority="user", source="user:turn-8",
                       observed_at=datetime(2026, 10, 19, 1, 24, 3, tzinfo=UTC))
    assert {k: v for k, v in new.record().items() if k != "id"} == {
        "key": "report.language", "value": "zh", "previous": "en", "source": "user:turn-8",
        "observed_at": "2026-10-19T01:24:03Z", "supersedes": "mem_7f31", "confidence": "explicit"}
    assert memory.facts[0].confidence == "recalled"  # long-term memory: possibly out of date
    assert memory.write("refund.rate", "0.0321", source="bi://refund/v2").confidence == "verified"
    assert memory.write("refund.rate", "0.0321", source="bi://refund/v2", confidence="explicit").confidence == \
        "explicit"
    with pytest.raises(ValueError, match="confidence"):
        memory.write("refund.rate", "0.03", confidence=cast(Any, "probably"))


def _read_only_task() -> tuple[Memory, Fact, Fact]:
    """The spec says read only; the user says "while you're at it, change it"."""
    memory = Memory()
    task = memory.write("task.access", "只读", authority="task", source="task:spec")
    change = memory.write("task.access", "顺便改一下", authority="user", source="user:turn-9")
    return memory, task, change


def test_a_users_change_to_a_task_constraint_waits_for_confirmation() -> None:
    memory, task, change = _read_only_task()
    assert change.held_against == task.id and change.supersedes is None and change.previous == "只读"
    assert memory.current_fact("task.access") == task and memory.held() == [change]
    built = ContextBuilder(budget=2000).build([Segment(name="system", kind="system", text="规则。", policy="pin"),
                                               *memory.segments()])
    text = built.text()
    assert "task.access: 只读" in text and "task.access: 顺便改一下" not in text
    assert "awaiting the user's confirmation: change task constraint task.access from '只读' to '顺便改一下'" in text
    manifest = memory.record(build_manifest(call_id="c", run_id="r", step=0, model="m", window=1000))
    reason = {i.id: i.reason for i in manifest.items}[change.id]
    assert reason.startswith("held for confirmation: the user's change of task constraint task.access")

    confirmed = memory.confirm(change.id, source="user:turn-10")
    assert confirmed.supersedes == task.id and memory.current_fact("task.access") == confirmed
    assert memory.held() == [] and memory.facts[:2] == [task, change]  # appended, never rewritten
    reasons = {i.id: i.reason for i in memory.record(
        build_manifest(call_id="c", run_id="r", step=1, model="m", window=1000)).items}
    assert f"superseded by {confirmed.id}" in reasons[task.id]
    assert f"was confirmed in {confirmed.id} (user:turn-10)" in reasons[change.id]


def test_a_rejected_change_leaves_the_task_constraint_in_force() -> None:
    memory, task, change = _read_only_task()
    rejected = memory.reject(change.id, source="user:turn-10")
    assert memory.current() == [task] and memory.held() == []
    assert "顺便改一下" not in "\n".join(s.text for s in memory.segments())
    reasons = {i.id: i.reason for i in memory.record(
        build_manifest(call_id="c", run_id="r", step=1, model="m", window=1000)).items}
    assert f"was rejected in {rejected.id}" in reasons[change.id]
    assert reasons[rejected.id].startswith("rejected: task.access stays '只读'")
    with pytest.raises(ValueError, match="not a change waiting"):
        memory.confirm(change.id)
    # Changes that need no confirmation still apply at once: the user over a preference, the system over a task.
    assert memory.write("task.access", "只读，且不得导出", authority="system").supersedes == task.id
