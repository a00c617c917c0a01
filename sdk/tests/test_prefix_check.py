"""Prefix stability in an agent's CI: ctxkit.testing (assert_prefix_stable, scan_prefix) and
``ctxkit check-prefix`` on two manifests files."""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from secrets import token_hex

import msgspec
import pytest

from ctxkit import Block, ContextBuilder, Segment
from ctxkit.cli import main
from ctxkit.fixtures import SYSTEM, TOOLS
from ctxkit.testing import assert_prefix_stable, scan_prefix, seeded_ids, shifted_clock

RULES = "You are the refund analyst.\nAnswer with numbers and their sources.\nNever refund to a new card."
TOOL_SCHEMAS = [
    {"name": "search_orders", "description": "Find orders by id.", "input_schema": {"type": "object"}},
    {"name": "refund", "description": "Refund an order (irreversible).", "input_schema": {"type": "object"}},
    {"name": "bi_query", "description": "Run a BI query.", "input_schema": {"type": "object"}},
]


def builder_agent(*, with_time: bool) -> ContextBuilder:
    """An agent's ContextBuilder step; ``with_time`` puts the current time into its system prompt."""
    builder = ContextBuilder(budget=4000, reserve=400)

    def build(question: str):
        system = RULES + (f"\nCurrent time: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC" if with_time else "")
        return builder.build(
            [Segment(name="system", kind="system", text=system, priority=100, policy="pin"),
             Segment(name="tools", kind="tools", text=TOOLS, priority=60, policy="pin")],
            blocks=[Block("question", "user", question)],
        )

    return build


# --------------------------------------------------------------------------- #
# assert_prefix_stable


def test_a_builder_with_the_current_time_in_its_system_prompt_fails_naming_that_line():
    with pytest.raises(AssertionError) as raised:
        assert_prefix_stable(builder_agent(with_time=True))
    message = str(raised.value)
    assert "[the clock 25 h 7 min 13 s later] segment 'system', line 4:" in message
    assert "'Current time: " in message and "the line holds a timestamp" in message
    assert "--- before/system" in message and "\n  +Current time: " in message
    # Only the clock moved the prefix: the ids and the user's message did not.
    assert "other random ids" not in message and "another user message" not in message


def test_the_same_builder_without_the_time_passes_and_returns_its_prefix():
    segments = assert_prefix_stable(builder_agent(with_time=False))
    assert [s.name for s in segments] == ["system", "tools"]
    assert segments[0].text == RULES and len(segments[0].lines) == 3


def anthropic_request(question: str, *, session: str) -> dict:
    return {
        "model": "claude-sonnet-4-5", "max_tokens": 512,
        "tools": TOOL_SCHEMAS,
        "system": [{"type": "text", "text": f"{RULES}\nSession: {session}", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": question,
                                                    "cache_control": {"type": "ephemeral"}}]}],
    }


def test_a_random_id_in_the_system_prompt_fails_under_other_ids():
    with pytest.raises(AssertionError) as raised:
        assert_prefix_stable(lambda question: anthropic_request(question, session=str(uuid.uuid4())))
    message = str(raised.value)
    assert "[other random ids] segment 'system', line 4: 'Session: " in message
    assert "the line holds a UUID" in message
    assert "the clock" not in message and "a second call" not in message


@pytest.mark.parametrize("make_id", [
    lambda: token_hex(8),  # `from secrets import token_hex` above: the helper patches the name here
    lambda: os.urandom(6).hex(),
    lambda: f"{random.getrandbits(48):x}",
    lambda: str(uuid.uuid1()),
], ids=["token_hex", "urandom", "random", "uuid1"])
def test_other_kinds_of_random_ids_are_reseeded_too(make_id):
    with pytest.raises(AssertionError) as raised:
        assert_prefix_stable(lambda question: anthropic_request(question, session=make_id()))
    message = str(raised.value)
    assert "[other random ids] segment 'system', line 4" in message and "a second call" not in message


def test_a_fixed_session_and_a_moving_breakpoint_pass():
    # The breakpoint is on the user's message: the conversation from it on is the new turn.
    segments = assert_prefix_stable(lambda question: anthropic_request(question, session="refunds"))
    assert [s.name for s in segments] == ["tools", "system", "messages"]


def test_the_question_in_the_system_prompt_fails_under_another_user_message():
    def build(question: str) -> dict:
        return {"system": f"{RULES}\nThe user asks: {question}", "messages": [{"role": "user", "content": question}]}

    with pytest.raises(AssertionError) as raised:
        assert_prefix_stable(build)
    message = str(raised.value)
    assert "[another user message] segment 'system', line 4: 'The user asks: What changed" in message


recently_used: list[str] = []


def test_tools_reordered_by_recent_use_fail_naming_the_tools_segment():
    """Tools sorted most recently used first: the second, otherwise identical call reorders them."""

    def build() -> dict:
        tools = sorted(TOOL_SCHEMAS, key=lambda t: recently_used.index(t["name"])
                       if t["name"] in recently_used else len(recently_used))
        recently_used.insert(0, tools[-1]["name"])  # the agent used its last tool
        return {"model": "claude-sonnet-4-5", "system": RULES, "tools": tools,
                "messages": [{"role": "user", "content": "Refund ORD-1?"}]}

    with pytest.raises(AssertionError) as raised:
        assert_prefix_stable(build)
    message = str(raised.value)
    assert "[a second call, nothing changed] segment 'tools', line 1: the same lines in another order" in message
    assert '"name":"bi_query"' in message
    assert "the clock" not in message and "the other conditions were not tried" in message


def test_tools_shuffled_by_random_fail_and_the_layout_sorts_them_back():
    def request() -> dict:
        tools = list(TOOL_SCHEMAS)
        random.shuffle(tools)
        return {"model": "gpt-5", "tools": [{"type": "function", "function": t} for t in tools],
                "messages": [{"role": "system", "content": RULES}, {"role": "user", "content": "Refund ORD-1?"}]}

    with pytest.raises(AssertionError) as raised:
        assert_prefix_stable(request)
    message = str(raised.value)
    assert "[other random ids] segment 'tools', line 2: the same lines in another order" in message
    assert "a second call" not in message

    builder = ContextBuilder(budget=4000, reserve=400)

    def built():
        tools = [Block(t["name"], "tools", data=t) for t in TOOL_SCHEMAS]
        random.shuffle(tools)
        return builder.build([Segment(name="system", kind="system", text=RULES, priority=100, policy="pin")],
                             blocks=[*tools, Block("question", "user", "Refund ORD-1?")])

    segments = assert_prefix_stable(built)
    assert segments[-1].name == "tools" and '"name":"bi_query"' in segments[-1].text.split("\n")[0]


def test_an_epoch_in_openai_messages_fails_under_the_clock():
    def request(question: str) -> list[dict]:
        return [{"role": "system", "content": f"{RULES}\nbuild={int(time.time())}"},
                {"role": "user", "content": question}]

    with pytest.raises(AssertionError) as raised:
        assert_prefix_stable(request)
    assert "segment 'system', line 4: 'build=" in str(raised.value)
    assert "the line holds a unix epoch" in str(raised.value)


def test_the_clock_and_ids_are_restored_after_the_block():
    real = datetime.now(UTC)
    with shifted_clock(timedelta(hours=3), build=test_the_clock_and_ids_are_restored_after_the_block) as at:
        assert datetime.now(UTC) == at and time.time() == at.timestamp() and date.today() == at.astimezone().date()
        assert isinstance(real, datetime) and type(datetime.now(UTC)) is type(real)
    assert datetime.now(UTC) < at and type(datetime.now(UTC)) is type(real)  # the real clock is back
    with seeded_ids(7):
        first = (uuid.uuid4(), random.random())
    with seeded_ids(7):
        again = (uuid.uuid4(), random.random())
    assert first == again and uuid.uuid4() != first[0]


# --------------------------------------------------------------------------- #
# scan_prefix


def test_the_scan_names_the_segment_and_line_of_a_timestamp_and_a_uuid():
    request = {"system": f"{RULES}\nBuilt at 2026-12-06T02:50:00Z.",
               "tools": [TOOL_SCHEMAS[0], {**TOOL_SCHEMAS[1], "description": "Refund (tenant "
                                                                             "3f2c1a7b-9d4e-4c1a-8b2f-0e9d8c7b6a51)."}],
               "messages": [{"role": "user", "content": "Refund ORD-1?"}]}
    found = {(f.segment, f.line, f.kind, f.value) for f in scan_prefix(request)}
    assert ("system", 4, "a timestamp", "2026-12-06T02:50:00Z") in found
    assert ("tools", 2, "a UUID", "3f2c1a7b-9d4e-4c1a-8b2f-0e9d8c7b6a51") in found
    assert not [f for f in scan_prefix(request) if f.segment == "tools" and f.line == 1]


def test_the_scan_reads_a_build_callable_and_a_clean_prefix_has_no_findings():
    findings = scan_prefix(builder_agent(with_time=True))
    assert [(f.segment, f.line, f.kind) for f in findings][0] == ("system", 4, "a timestamp")
    assert scan_prefix(builder_agent(with_time=False)) == []


# --------------------------------------------------------------------------- #
# ctxkit check-prefix on two manifests files


def record_run(path: Path, run_id: str, *, with_time: bool, steps: int = 4) -> list:
    """An agent loop that writes its manifests as JSON lines (as a client's spool does)."""
    builder = ContextBuilder(budget=4000, reserve=400)
    start = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    manifests = []
    for step in range(steps):
        at = start + timedelta(seconds=40 * step)
        system = SYSTEM + (f"\nCurrent time: {at:%Y-%m-%d %H:%M:%S} UTC." if with_time else "")
        built = builder.build([Segment(name="system", kind="system", text=system, priority=100, policy="pin"),
                               Segment(name="tools", kind="tools", text=TOOLS, priority=60, policy="pin")],
                              blocks=[Block("question", "user", f"step {step}: refund rate by channel?")])
        manifests.append(built.manifest(call_id=f"{run_id}-{step}", run_id=run_id, step=step,
                                        model="claude-sonnet-4-5", provider="anthropic", started_at=at))
    path.write_bytes(b"".join(msgspec.json.encode(m) + b"\n" for m in manifests))
    return manifests


def test_check_prefix_exits_1_naming_the_line_and_the_extra_cost(tmp_path, capsys):
    record_run(tmp_path / "main.jsonl", "main-eval", with_time=False)
    after = record_run(tmp_path / "pr.jsonl", "pr-eval", with_time=True)
    assert main(["check-prefix", str(tmp_path / "main.jsonl"), str(tmp_path / "pr.jsonl")]) == 1
    out = capsys.readouterr().out
    system_lines = SYSTEM.count("\n") + 2
    assert f"PREFIX CHANGED at step 0 (main-eval-0 -> pr-eval-0): segment 'system', line {system_lines}: " \
           f"added 'Current time: 2026-12-01 09:00:00 UTC.'" in out
    assert "+Current time: 2026-12-01 09:00:00 UTC." in out
    # Every call of the new run changes its prefix, so every call writes the whole prefix (system
    # is its first segment) instead of reading it: (1.25 - 0.1) per 1k tokens, a thousand times.
    tokens = after[0].prefix.tokens
    assert f"{tokens} tokens a call" in out
    assert f"estimated extra cost: {tokens * 1.15:,.2f} per 1,000 calls" in out

    assert main(["check-prefix", str(tmp_path / "main.jsonl"), str(tmp_path / "pr.jsonl"), "--json",
                 "--prices", "input=3,cache_read=0.3,cache_write=3.75"]) == 1
    result = json.loads(capsys.readouterr().out)
    first = result["changes"][0]["change"]
    assert result["changed"] is True and len(result["changes"]) == 4
    assert (first["segment"], first["line"]) == ("system", system_lines)
    assert result["extra_cost_per_1000_calls"] == pytest.approx(tokens * 3.45)


def test_check_prefix_exits_0_on_two_runs_of_an_unchanged_agent(tmp_path, capsys):
    record_run(tmp_path / "main.jsonl", "main-eval", with_time=False)
    record_run(tmp_path / "pr.jsonl", "pr-eval", with_time=False)
    assert main(["check-prefix", str(tmp_path / "main.jsonl"), str(tmp_path / "pr.jsonl")]) == 0
    assert "prefix unchanged" in capsys.readouterr().out


def test_check_prefix_says_which_run_to_choose_and_exits_2(tmp_path, capsys):
    record_run(tmp_path / "a.jsonl", "one", with_time=False)
    record_run(tmp_path / "b.jsonl", "two", with_time=False)
    (tmp_path / "both.jsonl").write_bytes((tmp_path / "a.jsonl").read_bytes() + (tmp_path / "b.jsonl").read_bytes())
    assert main(["check-prefix", str(tmp_path / "both.jsonl"), str(tmp_path / "b.jsonl")]) == 2
    assert "holds 2 runs (one, two)" in capsys.readouterr().err
    assert main(["check-prefix", str(tmp_path / "both.jsonl"), str(tmp_path / "b.jsonl"), "--before-run", "one"]) == 0
    (tmp_path / "summaries.json").write_text(json.dumps({"results": [{"call_id": "x", "run_id": "one", "step": 0}]}))
    assert main(["check-prefix", str(tmp_path / "a.jsonl"), str(tmp_path / "summaries.json")]) == 2
    assert "no prefix recorded in one of the runs" in capsys.readouterr().out
