"""HEAD / MIDDLE / TAIL layout and the stable prefix hash."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import msgspec
import pytest

from ctxkit.context.layout import Block, arrange, volatile_warnings
from ctxkit.manifest import Prefix, convert_manifest

SYSTEM = "You are the refund assistant. Follow policy P-7."
SEARCH = {"name": "search_orders", "description": "Find orders", "input_schema": {"type": "object", "required": ["q"]}}
REFUND = {"name": "refund", "description": "Refund an order", "input_schema": {"type": "object"}}


def chars(text: str) -> int:
    return len(text)


def blocks(system: str = SYSTEM, tools: tuple[dict, ...] = (SEARCH, REFUND), question: str = "Refund ORD-1?"):
    return [
        Block("question", "user", question),
        Block("old-lookup", "tool_result", "old lookup of ORD-0"),
        Block("task", "task", "Decide whether ORD-1 can be refunded."),
        *[Block(f"tool-{t['name']}", "tools", data=t) for t in tools],
        Block("rule", "constraint", "Only refund to the original card."),
        Block("sys", "system", system),
        Block("doc", "retrieval", "Policy P-7 text"),
        Block("summary", "summary", "Earlier: customer asked twice."),
        Block("obs", "tool_result", "ORD-1 delivered 2 days ago", current=True),
        Block("evidence", "retrieval", "P-7: refunds within 30 days", current=True),
    ]


def test_blocks_go_to_their_zones_in_the_documented_order() -> None:
    layout = arrange(blocks(), estimate=chars)
    assert [p.id for p in layout.head] == ["sys", "task", "rule", "tool-refund", "tool-search_orders"]
    assert [p.id for p in layout.middle] == ["old-lookup", "doc", "summary"]
    # current work, evidence right before the question, the question, constraints restated last
    assert [p.id for p in layout.tail] == ["obs", "evidence", "question", "rule#restated"]
    assert [p.position for p in layout.placed] == list(range(len(layout.placed)))


def test_positions_give_each_block_its_zone_and_place_for_the_manifest() -> None:
    layout = arrange(blocks(), estimate=chars)
    positions = layout.positions()
    assert positions["sys"] == ("head", 0)
    assert positions["doc"] == ("middle", 6)
    assert positions["rule"] == ("head", 2)
    assert positions["rule#restated"] == ("tail", 11)
    assert positions["question"] == ("tail", 10)


def test_restated_constraints_come_from_the_same_string_with_the_same_hash() -> None:
    layout = arrange(blocks(), estimate=chars)
    by_id = {p.id: p for p in layout.placed}
    head, tail = by_id["rule"], by_id["rule#restated"]
    assert tail.block.text is head.block.text
    assert tail.content_hash == head.content_hash
    assert tail.restated_from == "rule"
    assert not layout.warnings


def test_restating_can_be_turned_off_or_requested_per_block() -> None:
    off = arrange(blocks(), estimate=chars, restate_constraints=False)
    assert "rule#restated" not in off.positions()
    on = arrange([Block("task", "task", "Do X.", restate=True)], estimate=chars)
    assert [p.id for p in on.tail] == ["task#restated"]


def test_a_drifted_restatement_is_warned_about() -> None:
    layout = arrange(
        [
            Block("rule", "constraint", "Only the test env.", restate=False),
            Block("again", "constraint", "Only test env.", restates="rule"),
        ],
        estimate=chars,
    )
    assert layout.positions()["again"][0] == "tail"
    assert any("drifted" in w for w in layout.warnings)


def test_reordering_tools_does_not_change_the_prefix_hash() -> None:
    a = arrange(blocks(tools=(SEARCH, REFUND)), estimate=chars)
    b = arrange(blocks(tools=(REFUND, SEARCH)), estimate=chars)
    assert a.prefix_hash == b.prefix_hash
    assert [s.hash for s in a.segments] == [s.hash for s in b.segments]


def test_key_order_inside_a_tool_schema_does_not_change_the_prefix_hash() -> None:
    shuffled = {
        "input_schema": {"required": ["q"], "type": "object"},
        "description": "Find orders",
        "name": "search_orders",
    }
    a = arrange(blocks(tools=(SEARCH, REFUND)), estimate=chars)
    b = arrange(blocks(tools=(shuffled, REFUND)), estimate=chars)
    assert a.prefix_hash == b.prefix_hash


def test_a_timestamp_in_the_system_prompt_changes_the_hash_and_is_warned_about() -> None:
    stable = arrange(blocks(), estimate=chars)
    stamped = arrange(blocks(system=SYSTEM + " Now: 2026-03-01T09:30:00Z."), estimate=chars)
    later = arrange(blocks(system=SYSTEM + " Now: 2026-03-01T09:31:00Z."), estimate=chars)
    assert stable.prefix_hash != stamped.prefix_hash != later.prefix_hash
    assert not stable.warnings
    assert len(stamped.warnings) == 1
    assert "head block 'sys'" in stamped.warnings[0] and "2026-03-01T09:30:00Z" in stamped.warnings[0]
    # Only the system segment changed: a cache miss is pinned to it.
    changed = [s.name for s, t in zip(stable.segments, stamped.segments, strict=True) if s.hash != t.hash]
    assert changed == ["system"]


def test_volatile_values_on_their_own_line_or_in_tool_data_are_warned_about() -> None:
    layout = arrange(
        [
            Block("sys", "system", "Rules.\n2026-03-01 is the date."),
            Block("tool", "tools", data={"name": "x", "description": "build 3f2b8c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b"}),
        ],
        estimate=chars,
    )
    assert len(layout.warnings) == 2
    assert "'2026-03-01'" in layout.warnings[0] and "head block 'sys'" in layout.warnings[0]
    assert "a UUID" in layout.warnings[1] and "head block 'tool'" in layout.warnings[1]


def test_middle_and_tail_changes_leave_the_prefix_hash_alone() -> None:
    a = arrange(blocks(question="Refund ORD-1?"), estimate=chars)
    b = arrange(blocks(question="Refund ORD-2 at 10:45?"), estimate=chars)
    assert a.prefix_hash == b.prefix_hash
    assert not b.warnings  # volatile values in the tail are fine


def test_prefix_hash_is_the_sha256_of_the_head_serialisation() -> None:
    layout = arrange(blocks(), estimate=chars)
    assert layout.prefix_hash == hashlib.sha256(layout.head_serialisation.encode()).hexdigest()
    assert '"segment":"tools"' in layout.head_serialisation
    assert "tool-refund" not in layout.head_serialisation  # ids are not sent to the model


def test_to_prefix_fills_the_manifest_prefix() -> None:
    layout = arrange(blocks(), estimate=chars)
    prefix = layout.to_prefix()
    assert isinstance(prefix, Prefix)
    assert prefix.hash == layout.prefix_hash
    assert [s.name for s in prefix.segments] == ["system", "task", "constraint", "tools"]
    assert prefix.tokens == sum(p.tokens for p in layout.head) == sum(s.tokens for s in prefix.segments)
    assert prefix.segments[0].tokens == len(SYSTEM)
    body = {
        "schema": "ctxview.manifest/v1",
        "call_id": "c1",
        "run_id": "r1",
        "step": 0,
        "model": "m",
        "started_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "budget": {"window": 8000},
        "prefix": msgspec.to_builtins(prefix),
    }
    manifest, errors = convert_manifest(body)
    assert errors == [] and manifest.prefix.hash == layout.prefix_hash


def test_zone_override_and_user_content_in_the_head_are_warned_about() -> None:
    layout = arrange([Block("sys", "system", "Rules."), Block("q", "user", "What now?", zone="head")], estimate=chars)
    assert layout.positions()["q"] == ("head", 1)
    assert any("'user' content" in w for w in layout.warnings)
    assert layout.prefix_hash != arrange([Block("sys", "system", "Rules.")], estimate=chars).prefix_hash


def test_duplicate_block_ids_are_refused() -> None:
    with pytest.raises(ValueError):
        arrange([Block("a", "system", "x"), Block("a", "task", "y")], estimate=chars)


@pytest.mark.parametrize(
    ("text", "label", "value"),
    [
        ("Generated at 2026-03-01T09:30:00+08:00 for you.", "a timestamp", "2026-03-01T09:30:00+08:00"),
        ("Today's date: 2026-03-01.", "an ISO date", "2026-03-01"),
        ("Report for 2026年3月1日.", "a date", "2026年3月1日"),
        ("As of March 1, 2026.", "a date", "March 1, 2026"),
        ("Local time 09:30 in Berlin.", "a time of day", "09:30"),
        ("epoch=1767225600 seconds", "a unix epoch", "1767225600"),
        ("epoch 1767225600123 ms", "a unix epoch", "1767225600123"),
        ("session 3f2b8c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b", "a UUID", "3f2b8c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b"),
        ("trace 4bf92f3577b34da6a3ce929d0e0e4736", "a long hex id", "4bf92f3577b34da6a3ce929d0e0e4736"),
        ("request req_011CXk2aBcDeFgH", "a request/session id", "req_011CXk2aBcDeFgH"),
        ("Session ID: abc", "a request/session id", "Session ID: abc"),
        ("Today is Monday.", "the current date or time", "Today is"),
    ],
)
def test_volatile_warnings_name_each_kind_of_per_call_value(text: str, label: str, value: str) -> None:
    warnings = volatile_warnings(text)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"prefix holds {label} {value!r}")


def test_volatile_warnings_stay_quiet_on_a_stable_prompt() -> None:
    text = "You are the refund assistant v2. Follow policy P-7 and at most 3 retries. See docs/refunds.md:12."
    assert volatile_warnings(text) == []
