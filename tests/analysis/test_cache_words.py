"""Cache causes in the words of what a capture of Anthropic requests records: the system line
that changed, the tools added or removed by name, earlier messages cleared by a context edit or
replaced by a compaction, and the TTL the request's cache_control asked for. Each call is the
manifest the one mapping (ctxkit.instrument, ctxkit proxy) makes of a request and response
body, stored through the ingest service and analysed as the worker does."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from ctxkit.instrumentation.bodies import manifest_from_bodies
from ctxkit.manifest import Manifest
from manifests.models import CacheEvent
from tests.support import MODEL, T0, store_and_analyse

pytestmark = pytest.mark.django_db

# A system prompt long enough to be cached (above the 1,024-token minimum), then a line that moves.
RULES = "\n".join(f"Rule {n}: cite the evidence id of every refund decision and never guess an amount."
                  for n in range(1, 121))
TOOLS = [
    {"name": "get_refund", "description": "A refund by id.",
     "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}},
    {"name": "get_logs", "description": "The payment logs of an order.",
     "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}}},
]
MCP_TOOL = {"name": "mcp__github__create_issue", "description": "Open an issue on GitHub.",
            "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}}}
LOG = "order 17: charge 40 EUR ok; refund requested; " * 8
WROTE = {"input_tokens": 40, "cache_creation_input_tokens": 2600, "cache_read_input_tokens": 0, "output_tokens": 30}


def request(*, now: str = "Now: 2026-11-29T10:00:00Z", tools: list[dict] | None = None,
            cleared: bool = False, ttl: str | None = None, turns: int = 1) -> dict[str, Any]:
    """An agent's request: tools, a system prompt of two blocks (the rules, then a line with the
    time), and a conversation with its cache breakpoint on the newest message."""
    control: dict[str, str] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Why was order 17 refunded twice?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "get_logs",
                                           "input": {"order": "17"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                      "content": "[cleared]" if cleared else LOG}]},
    ]
    for n in range(turns):
        messages += [{"role": "assistant", "content": f"Checked step {n}."},
                     {"role": "user", "content": f"Go on ({n})."}]
    messages[-1] = {"role": "user", "content": [{"type": "text", "text": str(messages[-1]["content"]),
                                                 "cache_control": control}]}
    return {"model": MODEL, "max_tokens": 512, "tools": TOOLS if tools is None else tools,
            "system": [{"type": "text", "text": RULES}, {"type": "text", "text": now, "cache_control": control}],
            "messages": messages}


def captured(call_id: str, step: int, body: dict[str, Any], *, seconds: float, usage: dict[str, int] = WROTE,
             response: dict[str, Any] | None = None, include_text: bool = True) -> Manifest:
    answer = {"model": MODEL, "stop_reason": "end_turn", "content": [{"type": "text", "text": "ok"}],
              "usage": usage, **(response or {})}
    return manifest_from_bodies("anthropic.messages", body, response=answer, call_id=call_id, run_id="run-1",
                                step=step, started=(T0 + timedelta(seconds=seconds)).timestamp(), duration=2.0,
                                include_text=include_text)


def second_event(project, first: Manifest, second: Manifest) -> CacheEvent:
    calls = store_and_analyse(project, [first, second])
    return CacheEvent.objects.get(call=calls[1])


def test_it_names_the_system_line_that_changed_with_its_old_and_new_text(project):
    event = second_event(project, captured("c0", 0, request(), seconds=0),
                         captured("c1", 1, request(now="Now: 2026-11-29T10:00:30Z"), seconds=30))
    assert (event.cause, event.changed_segment) == (CacheEvent.PREFIX_CHANGED, "system")
    assert event.detail == ("system prompt line 121 changed: 'Now: 2026-11-29T10:00:00Z' → "
                            "'Now: 2026-11-29T10:00:30Z'; the cache is lost from there on")


def test_it_names_the_system_line_by_number_only_when_the_agent_withholds_text(project):
    event = second_event(project, captured("c0", 0, request(), seconds=0, include_text=False),
                         captured("c1", 1, request(now="Now: later"), seconds=30, include_text=False))
    assert event.detail == "system prompt line 121 changed (its text is not recorded); the cache is lost from there on"


def test_it_shortens_a_long_changed_line_around_its_first_difference(project):
    long_line = "Context: " + "the customer is a long-standing account in good standing; " * 6
    event = second_event(project, captured("c0", 0, request(now=long_line + "at 10:00."), seconds=0),
                         captured("c1", 1, request(now=long_line + "at 10:01."), seconds=30))
    old, new = re.search(r"changed: '(.*)' → '(.*)'; the cache", event.detail).groups()
    assert old.startswith("…") and old.endswith("at 10:00.") and new.endswith("at 10:01.")
    assert len(old) <= 61 and "Context:" not in old  # the difference, not the line's start


def test_it_names_an_mcp_tool_added_between_calls_and_its_server(project):
    event = second_event(project, captured("c0", 0, request(), seconds=0),
                         captured("c1", 1, request(tools=[*TOOLS, MCP_TOOL]), seconds=30))
    assert (event.cause, event.changed_segment) == (CacheEvent.PREFIX_CHANGED, "tools")
    assert event.detail == ("tool mcp__github__create_issue added: an MCP server (github) connected mid-session; "
                            "the cache is lost from there on")


def test_it_names_a_tool_removed_between_calls(project):
    event = second_event(project, captured("c0", 0, request(), seconds=0),
                         captured("c1", 1, request(tools=TOOLS[:1]), seconds=30))
    assert (event.cause, event.changed_segment) == (CacheEvent.PREFIX_CHANGED, "tools")
    assert event.detail == "tool get_logs removed; the cache is lost from there on"


def test_it_names_an_mcp_server_that_disconnected_with_its_tools(project):
    listing = {**MCP_TOOL, "name": "mcp__github__list_issues"}
    event = second_event(project, captured("c0", 0, request(tools=[*TOOLS, MCP_TOOL, listing]), seconds=0),
                         captured("c1", 1, request(), seconds=30))
    assert event.detail.startswith("tools mcp__github__create_issue, mcp__github__list_issues removed: "
                                   "an MCP server (github) disconnected mid-session;")


def test_it_names_the_tools_when_the_first_call_had_none(project):
    event = second_event(project, captured("c0", 0, request(tools=[]), seconds=0),
                         captured("c1", 1, request(tools=[MCP_TOOL]), seconds=30))
    assert event.changed_segment == "tools"
    assert event.detail.startswith("tool mcp__github__create_issue added: an MCP server (github) connected")


def test_it_names_a_tool_whose_definition_changed(project):
    changed = [TOOLS[0], {**TOOLS[1], "description": "The payment logs of an order, newest first."}]
    event = second_event(project, captured("c0", 0, request(), seconds=0),
                         captured("c1", 1, request(tools=changed), seconds=30))
    assert event.detail == "tool get_logs changed; the cache is lost from there on"


def test_it_names_tools_by_line_when_the_agent_withholds_text(project):
    event = second_event(project, captured("c0", 0, request(), seconds=0, include_text=False),
                         captured("c1", 1, request(tools=[*TOOLS, MCP_TOOL]), seconds=30, include_text=False))
    assert event.detail == "tool at line 3 added; the cache is lost from there on"


def test_it_calls_a_reordered_tool_list_reordered(project):
    event = second_event(project, captured("c0", 0, request(), seconds=0),
                         captured("c1", 1, request(tools=TOOLS[::-1]), seconds=30))
    assert event.detail.startswith("tools reordered: the same 2 tools in another order from line 1 "
                                   "(get_logs is now there)")


def test_it_names_the_context_edit_that_cleared_earlier_messages(project):
    edited = {"context_management": {"applied_edits": [
        {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 1, "cleared_input_tokens": 300}]}}
    event = second_event(project, captured("c0", 0, request(), seconds=0),
                         captured("c1", 1, request(cleared=True, turns=2), seconds=30, response=edited))
    assert (event.cause, event.changed_segment) == (CacheEvent.PREFIX_CHANGED, "messages")
    assert event.detail.startswith("earlier messages were cleared by a context edit (clear_tool_uses): "
                                   "messages line 3 changed: 'user: order 17: charge 40 EUR")
    assert event.detail.endswith("…' → 'user: [cleared]'; the cache is lost from there on")


def test_it_says_earlier_messages_changed_when_nothing_recorded_why(project):
    event = second_event(project, captured("c0", 0, request(), seconds=0),
                         captured("c1", 1, request(cleared=True, turns=2), seconds=30))
    assert event.detail.startswith("earlier messages were modified or removed: messages line 3 changed")


def test_it_names_the_previous_calls_compaction_that_replaced_earlier_messages(project):
    compacted = {"usage": {**WROTE, "iterations": [{"type": "compaction", "input_tokens": 9000,
                                                    "output_tokens": 400}]}}
    summary = request(turns=1)
    summary["messages"] = [{"role": "user", "content": [
        {"type": "compaction", "content": "Summary: order 17 was refunded twice by a retry."}]},
        summary["messages"][-1]]
    event = second_event(project, captured("c0", 0, request(), seconds=0, response=compacted),
                         captured("c1", 1, summary, seconds=30))
    assert event.changed_segment == "messages"
    assert event.detail.startswith("earlier messages were replaced by the compaction summary of the previous "
                                   "call (anthropic_compaction): messages line 1 changed")


def test_it_names_a_context_edit_the_provider_applied_to_a_request_that_only_grew(project):
    # Anthropic clears tool results server-side: the request grew, the prompt read did not.
    edited = {"context_management": {"applied_edits": [{"type": "clear_tool_uses_20250919"}]}}
    event = second_event(project, captured("c0", 0, request(), seconds=0),
                         captured("c1", 1, request(turns=2), seconds=30, response=edited))
    assert (event.cause, event.changed_segment) == (CacheEvent.PREFIX_CHANGED, "messages")
    assert event.detail.startswith("earlier messages were cleared by a context edit (clear_tool_uses) applied "
                                   "to this request")


@pytest.mark.parametrize("ttl, gap, cause, words", [
    ("1h", 2 * 3600, CacheEvent.TTL_EXPIRED, "(1 h TTL from the request's cache_control): an expected miss"),
    (None, 10 * 60, CacheEvent.TTL_EXPIRED, "(5 min TTL from the request's cache_control): an expected miss"),
    ("1h", 10 * 60, CacheEvent.COLD_START, "within the TTL"),
])
def test_it_takes_the_ttl_from_the_requests_cache_control(project, ttl, gap, cause, words):
    event = second_event(project, captured("c0", 0, request(ttl=ttl), seconds=0),
                         captured("c1", 1, request(ttl=ttl), seconds=gap))
    assert event.cause == cause
    assert words in event.detail


def test_it_shows_a_hostile_line_in_the_detail_as_text(project, owner):
    payload = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
    store_and_analyse(project, [captured("c0", 0, request(), seconds=0),
                                captured("c1", 1, request(now=payload), seconds=30)])
    assert "<script>" in CacheEvent.objects.get(call__call_id="c1").detail
    client = Client()
    client.force_login(owner)
    for url in (f"/p/{project.slug}/calls/c1/", f"/p/{project.slug}/runs/run-1/"):
        body = client.get(url, {"range": "all"}).content.decode()
        assert "<script>window.__pwned" not in body and 'onerror="window' not in body, url
    body = client.get(f"/p/{project.slug}/calls/c1/", {"range": "all"}).content.decode()
    assert "→ &#x27;&lt;script&gt;window.__pwned=1&lt;/script&gt;" in body
