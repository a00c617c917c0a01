"""A sub-agent's calls as the proxy's recorder places them (ctxkit.proxy.runs): Claude Code sends
them with the session's identity; the call whose first user message is the prompt of an ``Agent``
``tool_use`` the session's answer asked for starts a child run linked to that call. Exchanges
built by hand go through Capture.build, the mapping the proxy runs on every call."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from capture_support import build_all

from ctxkit.manifest import Manifest
from ctxkit.proxy.capture import Exchange, Outcome, delegations_of
from ctxkit.proxy.runs import Delegation

SESSION = {"x-claude-code-session-id": "5b0e-session", "user-agent": "claude-cli/2.1.332 (external, cli)"}
MAIN_SYSTEM = "You are Claude Code."
AGENT_SYSTEM = "You are a sub-agent of Claude Code."
TASK = "List the refund rules in docs/refunds.md and report them."
REMINDER = "<system-reminder>Today's date is 2026-12-06.</system-reminder>"
TOOL_USE = {"type": "tool_use", "id": "toolu_01AgentStart", "name": "Agent",
            "input": {"description": "List refund rules", "prompt": TASK, "subagent_type": "general-purpose"}}
ASK = [{"role": "user", "content": [{"type": "text", "text": REMINDER},
                                    {"type": "text", "text": "delegate: list the refund rules"}]}]


def _exchange(messages: list[Any], *, system: str = MAIN_SYSTEM, content: list[Any] | None = None,
              headers: dict[str, str] = SESSION, stream: bool = False) -> Exchange:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 512, "system": system, "messages": messages,
            "stream": stream}
    blocks = content or [{"type": "text", "text": "ok"}]
    response = {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": blocks, "stop_reason": "end_turn", "usage": {"input_tokens": 40, "output_tokens": 5}}
    chunks = [json.dumps(response).encode()]
    content_type = "application/json"
    if stream:
        content_type = "text/event-stream"
        chunks = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in _events(response)]
    return Exchange(api="anthropic.messages", request_body=json.dumps(body).encode(), headers=dict(headers),
                    started=time.time(), status=200, content_type=content_type, chunks=chunks)


def _events(response: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"type": "message_start", "message": {**response, "content": []}}]
    for index, block in enumerate(response["content"]):
        if block["type"] == "tool_use":
            out.append({"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}})
            encoded = json.dumps(block["input"])
            for piece in (encoded[:20], encoded[20:]):
                out.append({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece}})
        else:
            out.append({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
            out.append({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": block["text"]}})
        out.append({"type": "content_block_stop", "index": index})
    out.append({"type": "message_stop"})
    return out


def _delegating_session(*, stream: bool = False, task_tool: str = "Agent") -> list[Manifest]:
    tool_use = {**TOOL_USE, "name": task_tool}
    child_first = [{"role": "user", "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": TASK}]}]
    child_read = {"type": "tool_use", "id": "toolu_child_read", "name": "Read",
                  "input": {"file_path": "docs/refunds.md"}}
    child_second = [*child_first, {"role": "assistant", "content": [child_read]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_child_read",
                                                  "content": "Refunds over 500 need the finance desk."}]}]
    parent_next = [*ASK, {"role": "assistant", "content": [tool_use]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL_USE["id"],
                                                 "content": "Refunds over 500 need the finance desk."}]}]
    return build_all(
        _exchange(ASK, content=[{"type": "text", "text": "Delegating."}, tool_use], stream=stream),
        _exchange(child_first, system=AGENT_SYSTEM, content=[child_read], stream=stream),
        _exchange(child_second, system=AGENT_SYSTEM, content=[{"type": "text", "text": "One rule."}], stream=stream),
        _exchange(parent_next, content=[{"type": "text", "text": "Finance approves refunds over 500."}],
                  stream=stream),
    )


def test_a_sub_agents_calls_are_a_child_run_of_the_call_that_started_it():
    parent, child_first, child_second, parent_next = _delegating_session()
    child_run = f"session-5b0e-session/agent-{TOOL_USE['id']}"
    assert (parent.run_id, parent.step, parent_next.run_id, parent_next.step) == \
        ("session-5b0e-session", 0, "session-5b0e-session", 1)
    assert [(m.run_id, m.step) for m in (child_first, child_second)] == [(child_run, 0), (child_run, 1)]
    for child in (child_first, child_second):
        assert (child.parent_run_id, child.parent_call_id) == ("session-5b0e-session", parent.call_id)
        assert child.agent == "claude-cli:general-purpose"
    for main in (parent, parent_next):
        assert (main.parent_run_id, main.parent_call_id, main.agent) == (None, None, "claude-cli")


def test_a_streamed_task_tool_use_starts_a_child_run_too():
    parent, child_first, child_second, parent_next = _delegating_session(stream=True, task_tool="Task")
    assert child_first.run_id == child_second.run_id == f"{parent.run_id}/agent-{TOOL_USE['id']}"
    assert (child_first.step, child_second.step, parent_next.step) == (0, 1, 1)
    assert child_second.parent_call_id == parent.call_id


def test_a_side_request_of_the_session_stays_in_the_session_run():
    side = [{"role": "user", "content": "Write a 5-word title for: delegate: list the refund rules"}]
    parent, side_call, after = build_all(
        _exchange(ASK, content=[TOOL_USE]),
        _exchange(side, system="Generate a concise title."),
        _exchange([{"role": "user", "content": [{"type": "text", "text": "Something unrelated."}]}],
                  system=AGENT_SYSTEM),
    )
    assert [(m.run_id, m.step) for m in (parent, side_call, after)] == \
        [("session-5b0e-session", 0), ("session-5b0e-session", 1), ("session-5b0e-session", 2)]
    assert side_call.parent_run_id is None and after.parent_run_id is None


def test_the_main_conversation_opening_with_the_prompt_stays_in_the_session_run():
    # The user asked with the very words the model then delegated: the next call extends the
    # session's own conversation, so it is no sub-agent's.
    asked = [{"role": "user", "content": TASK}]
    following = [*asked, {"role": "assistant", "content": [TOOL_USE]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": TOOL_USE["id"], "content": "x"}]}]
    parent, again = build_all(_exchange(asked, content=[TOOL_USE]), _exchange(following))
    assert (again.run_id, again.step, again.parent_run_id) == (parent.run_id, 1, None)


def test_a_prompt_another_session_asked_for_stays_in_its_own_session():
    other = {**SESSION, "x-claude-code-session-id": "other-session"}
    _, elsewhere = build_all(_exchange(ASK, content=[TOOL_USE]),
                            _exchange([{"role": "user", "content": TASK}], headers=other))
    assert (elsewhere.run_id, elsewhere.step, elsewhere.parent_run_id) == ("session-other-session", 0, None)


def test_a_sub_agent_without_a_session_is_a_child_of_the_run_that_asked():
    parent, child, child_next = build_all(
        _exchange(ASK, content=[TOOL_USE], headers={}),
        _exchange([{"role": "user", "content": TASK}], headers={}, content=[{"type": "text", "text": "Reading."}]),
        _exchange([{"role": "user", "content": TASK}, {"role": "assistant", "content": "Reading."},
                   {"role": "user", "content": "Go on."}], headers={}),
    )
    assert child.run_id == child_next.run_id == f"{parent.run_id}/agent-{TOOL_USE['id']}"
    assert (child.step, child_next.step) == (0, 1)
    assert child_next.parent_call_id == parent.call_id and child_next.agent == "proxy:general-purpose"


def test_a_long_parent_run_id_gives_a_child_run_id_within_the_limit():
    run = {"x-ctxview-run": "r" * 190}
    parent, child = build_all(_exchange(ASK, content=[TOOL_USE], headers=run),
                             _exchange([{"role": "user", "content": TASK}], headers={}))
    assert parent.run_id == "r" * 190
    assert len(child.run_id) <= 200 and child.parent_run_id == parent.run_id and child.step == 0


def test_delegations_are_read_from_a_response_and_a_stream():
    other = {"type": "tool_use", "id": "toolu_read", "name": "Read", "input": {"file_path": "a"}}
    response = {"content": [{"type": "text", "text": "Delegating."}, other, TOOL_USE]}
    want = (Delegation(TOOL_USE["id"], TASK, "general-purpose"),)
    assert delegations_of(Outcome(api="anthropic.messages", response=response)) == want
    assert delegations_of(Outcome(api="anthropic.messages", events=_events({**response, "id": "m"}))) == want
    broken = [{"type": "content_block_start", "index": 0, "content_block": {**TOOL_USE, "input": {}}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{"}},
              {"type": "content_block_stop", "index": 0}]
    assert delegations_of(Outcome(api="anthropic.messages", events=broken)) == ()
