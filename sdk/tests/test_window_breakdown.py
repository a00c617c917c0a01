"""The window by category (ctxkit.breakdown) and the memory files the mapping recognises."""

from __future__ import annotations

import time

from ctxkit.agents import memory_files
from ctxkit.breakdown import CATEGORIES, SEGMENTS, from_totals, item_category, summed, window_breakdown
from ctxkit.context.layout import canonical_json
from ctxkit.instrumentation.bodies import manifest_from_bodies
from ctxkit.manifest import Action, Item, ItemKind

CLAUDE_MD = ("<system-reminder>\nCodebase and user instructions are shown below. Be sure to adhere to these "
             "instructions.\n\nContents of /home/u/.claude/CLAUDE.md (user's private global instructions for all "
             "projects):\n\nBe terse.\n\nContents of /srv/my app/CLAUDE.md (project instructions, checked into the "
             "codebase):\n\n# Rules\nAlways run the tests.\n</system-reminder>")


def _item(item_id: str, kind: ItemKind, tokens: int, *, action: Action = "keep", text: str | None = None) -> Item:
    return Item(id=item_id, kind=kind, action=action, requested_tokens=tokens,
                used_tokens=tokens if action == "keep" else None, text=text)


def _anthropic(request: dict) -> list[Item]:
    return manifest_from_bodies("anthropic.messages", request, run_id="r", step=0, started=time.time()).items


def test_a_claude_code_memory_reminder_becomes_a_memory_item_naming_its_files():
    items = _anthropic({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "You are Claude Code.",
                        "messages": [{"role": "user", "content": [
                            {"type": "text", "text": CLAUDE_MD},
                            {"type": "text", "text": "<system-reminder>\nAttribution: none\n</system-reminder>"},
                            {"type": "text", "text": "fix the bug"}]}]})
    by_id = {i.id: i for i in items}
    memory = by_id["messages[0].content[0]"]
    assert memory.kind == "memory" and memory.trust == "trusted"
    assert memory.source_ref == "/home/u/.claude/CLAUDE.md, /srv/my app/CLAUDE.md"
    assert memory.text == CLAUDE_MD
    # The memory block is no user text: the first other one is the task, the last the user's turn.
    assert by_id["messages[0].content[1]"].kind == "task"
    assert by_id["messages[0].content[2]"].kind == "user"
    assert by_id["messages[0].content[2]"].source_ref == "messages[0].content[2]"


def test_a_codex_agents_md_message_becomes_a_memory_item():
    manifest = manifest_from_bodies("openai.responses", {
        "model": "gpt-5", "instructions": "You are Codex.",
        "input": [{"type": "message", "role": "user", "content": [
                      {"type": "input_text", "text": "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nUse pytest."
                                                     "\n</INSTRUCTIONS>"}]},
                  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add a test"}]}],
    }, run_id="r", step=0, started=time.time())
    kinds = {i.id: (i.kind, i.source_ref) for i in manifest.items}
    assert kinds["input[0]"] == ("memory", "/repo/AGENTS.md")
    assert kinds["input[1]"] == ("task", "input[1]")


def test_other_reminders_and_text_that_only_looks_like_one_stay_what_they_were():
    assert memory_files("<system-reminder>\nThe date is 2026-12-06.\n</system-reminder>") is None
    assert memory_files("Contents of /etc/hosts (a file):\n\n127.0.0.1") is None
    assert memory_files("please read # AGENTS.md instructions for /x") is None
    items = _anthropic({"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [
        {"role": "assistant", "content": CLAUDE_MD},  # not user text: the agent's own turn
        {"role": "user", "content": "Contents of /etc/hosts (a file):\n\n127.0.0.1"}]})
    assert [i.kind for i in items] == ["history", "task"]


def test_the_breakdown_puts_each_item_in_its_category_with_its_tokens_in_context():
    tool = canonical_json({"name": "Read", "description": "reads", "input_schema": {"type": "object"}})
    mcp = canonical_json({"name": "mcp__github__search", "description": "searches", "input_schema": {}})
    mcp_openai = canonical_json({"type": "function", "function": {"name": "mcp__db__query", "parameters": {}}})
    items = [
        _item("s", "system", 300), _item("t1", "tools", 100, text=tool), _item("t2", "tools", 40, text=mcp),
        _item("t3", "tools", 60, text=mcp_openai), _item("t4", "tools", 10),  # no text: built-in
        _item("m", "memory", 50), _item("q", "task", 20), _item("h", "history", 30), _item("u", "user", 5),
        _item("r", "tool_result", 400), _item("gone", "tool_result", 999, action="drop"),
        _item("old", "history", 700, action="clear"),
    ]
    b = window_breakdown(items, window=10_000, input_tokens=0)
    assert b.tokens == {"system": 300, "tools": 110, "mcp_tools": 100, "memory": 50, "messages": 55,
                        "tool_results": 400}
    assert (b.items["tools"], b.items["mcp_tools"], b.items["tool_results"]) == (2, 2, 1)
    # Nothing reported: the input read is what the items count, and the rest of the window is free.
    assert (b.counted, b.input_read, b.unitemized, b.free, b.over) == (1015, 1015, 0, 8985, 0)
    assert sum(b.segment(s) for s in SEGMENTS) == b.window == b.scale
    assert b.share("tool_results") == 0.04 and b.utilization == 0.1015
    assert [item_category(i) for i in items[:4]] == ["system", "tools", "mcp_tools", "mcp_tools"]


def test_free_space_is_the_window_less_the_reported_input_with_the_rest_unitemized():
    rows = [("system", 1000, 1), ("messages", 500, 2)]
    b = from_totals(rows, window=8000, input_tokens=2000)
    assert (b.input_read, b.unitemized, b.free) == (2000, 500, 6000)
    assert sum(b.segment(s) for s in SEGMENTS) == 8000
    # Items estimated above the report: nothing unitemized, and the bar is longer than the window.
    low = from_totals(rows, window=8000, input_tokens=1200)
    assert (low.unitemized, low.free, low.scale) == (0, 6800, 8300)
    # Over the window: no free space, and by how much it is over.
    over = from_totals(rows, window=1000, input_tokens=1300)
    assert (over.free, over.over, over.scale) == (0, 300, 1500)


def test_a_steps_calls_add_up_segment_by_segment():
    a = from_totals([("system", 100, 1), ("tools", 50, 2)], window=1000, input_tokens=0)
    b = from_totals([("mcp_tools", 30, 1)], window=1000, input_tokens=200)
    s = summed([a, b])
    assert (s.window, s.input_read, s.free, s.unitemized, s.calls) == (2000, 350, 1650, 170, 2)
    assert s.tokens == {"system": 100, "tools": 50, "mcp_tools": 30, "memory": 0, "messages": 0, "tool_results": 0}
    assert s.items["tools"] == 2 and s.items["mcp_tools"] == 1
    assert tuple(s.tokens) == CATEGORIES
