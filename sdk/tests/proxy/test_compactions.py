"""Compactions an agent does itself, as the proxy's recorder sees them (ctxkit.proxy.compactions):
exchanges built by hand go through Capture.build, the mapping the proxy runs on every call."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from capture_support import build_all

from ctxkit.proxy.capture import Exchange, Outcome, answer_text

RUN = {"x-ctxview-run": "ticket-9"}
SYSTEM = "You answer questions about refunds."
EARLY = [
    {"role": "user", "content": "What is the refund rate? The sheet says 0.0321."},
    {"role": "assistant", "content": "The refund rate is 0.0321."},
    {"role": "user", "content": "And who approves refunds?"},
    {"role": "assistant", "content": "The finance desk."},
    {"role": "user", "content": "Draft a reply."},
]


def _exchange(messages: list[Any], *, headers: dict[str, str] | None = None, usage: dict[str, Any] | None = None,
              content: list[Any] | None = None, run: dict[str, str] = RUN) -> Exchange:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 512, "system": SYSTEM, "messages": messages}
    response = {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": content or [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                "usage": usage or {"input_tokens": 40 * len(messages), "output_tokens": 5}}
    return Exchange(api="anthropic.messages", request_body=json.dumps(body).encode(),
                    headers={**run, **(headers or {})}, started=time.time(), status=200,
                    content_type="application/json", chunks=[json.dumps(response).encode()])


def test_a_shorter_history_opening_with_a_summary_is_a_compaction():
    evidence = {"x-ctxview-evidence": json.dumps({"refund_rate": "0.0321", "approver": "finance desk"})}
    summary = "Summary: the user asked about refunds; the finance desk approves them."
    before, after = build_all(_exchange(EARLY, headers=evidence),
                             _exchange([{"role": "user", "content": summary},
                                        {"role": "assistant", "content": "Understood."},
                                        {"role": "user", "content": "Draft a reply."}], headers=evidence))
    assert before.compactions == []
    [compaction] = after.compactions
    item = next(i for i in after.items if i.kind == "summary")
    assert item.text == summary and compaction.summary_item == item.id
    assert (compaction.strategy, compaction.trigger) == ("client_summary", "")
    assert (compaction.tokens_before, compaction.tokens_after) == (200, 120)
    assert compaction.kept_turns == 0  # the last user message is the prompt just added
    [invariant] = compaction.invariants
    assert (invariant.name, invariant.ok, invariant.lost) == ("required_evidence", False, ["refund_rate"])
    assert invariant.detail == "1 of 2 missing after compaction"
    assert (after.run_id, after.step) == (before.run_id, before.step + 1)


def test_a_shorter_history_without_a_summary_is_not_a_compaction():
    _, after = build_all(_exchange(EARLY), _exchange([{"role": "user", "content": "A new question."}]))
    assert after.compactions == [] and not any(i.kind == "summary" for i in after.items)


def test_the_calls_that_extend_a_compacted_history_are_not_compactions_again():
    compacted = [{"role": "user", "content": "Summary: refunds were discussed."},
                 {"role": "user", "content": "Draft a reply."}]
    _, first, second = build_all(_exchange(EARLY), _exchange(compacted),
                                _exchange([*compacted, {"role": "assistant", "content": "Dear customer"},
                                           {"role": "user", "content": "Shorter."}]))
    assert len(first.compactions) == 1 and second.compactions == []


def test_a_summary_later_in_the_history_is_not_taken_for_one():
    _, after = build_all(_exchange(EARLY), _exchange([{"role": "user", "content": "Hello"},
                                                     {"role": "assistant", "content": "Hi"},
                                                     {"role": "user", "content": "Summary: be brief."}]))
    assert after.compactions == [] and not any(i.kind == "summary" for i in after.items)


def test_a_provider_compaction_is_not_counted_twice():
    block = {"type": "compaction", "content": "The user asked about refunds."}
    usage = {"input_tokens": 300, "output_tokens": 40,
             "iterations": [{"type": "compaction", "input_tokens": 5000, "output_tokens": 300}]}
    provider, next_call = build_all(_exchange(EARLY, usage=usage, content=[block]),
                                   _exchange([{"role": "user", "content": [block]},
                                              {"role": "user", "content": "Draft a reply."}]))
    assert [c.strategy for c in provider.compactions] == ["anthropic_compaction"]
    assert next_call.compactions == [] and any(i.kind == "summary" for i in next_call.items)


def test_an_anthropic_compaction_block_sent_back_is_a_compaction_when_none_was_recorded():
    block = {"type": "compaction", "content": "The user asked about refunds."}
    _, after = build_all(_exchange(EARLY), _exchange([{"role": "user", "content": [block]},
                                                     {"role": "user", "content": "Draft a reply."}]))
    assert [(c.strategy, c.trigger) for c in after.compactions] == [("anthropic_compaction", "provider")]


def test_a_malformed_evidence_header_is_ignored_with_a_warning():
    [manifest] = build_all(_exchange(EARLY, headers={"x-ctxview-evidence": "refund_rate=0.0321"}))
    assert manifest.evidence == []
    assert "X-Ctxview-Evidence is not a JSON object of non-empty strings: ignored" in manifest.warnings


def test_a_compacted_history_continues_the_run_that_wrote_its_summary():
    written = ("Summary:\nThe customer asked about the refund rate and who approves refunds.\n"
               "A reply to the customer is still to be drafted.")
    ask = {"role": "user", "content": "Summarise the conversation so far."}
    first, summarising, after = build_all(
        _exchange(EARLY, run={}),
        _exchange([*EARLY, {"role": "assistant", "content": "Drafting."}, ask], run={},
                  content=[{"type": "text", "text": written}]),
        _exchange([{"role": "user", "content": written}, {"role": "user", "content": "Draft a reply."}], run={}),
    )
    assert summarising.run_id == first.run_id == after.run_id
    assert [first.step, summarising.step, after.step] == [0, 1, 2]
    [compaction] = after.compactions
    assert compaction.tokens_before == summarising.usage.input_tokens


def test_a_summary_nobody_answered_starts_a_run_of_its_own():
    _, after = build_all(_exchange(EARLY, run={}),
                        _exchange([{"role": "user", "content": "Summary: a conversation this proxy never saw."},
                                   {"role": "user", "content": "Go on."}], run={}))
    assert after.step == 0 and after.compactions == []


@pytest.mark.parametrize("outcome", [
    Outcome(api="anthropic.messages",
            response={"content": [{"type": "text", "text": "Summary: "}, {"type": "text", "text": "refunds"}]}),
    Outcome(api="openai.chat",
            response={"choices": [{"message": {"role": "assistant", "content": "Summary: refunds"}}]}),
    Outcome(api="openai.responses", response={"output": [{"type": "message", "content": [{"type": "output_text",
                                                                   "text": "Summary: refunds"}]}]}),
    Outcome(api="anthropic.messages",
            events=[{"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Summary: "}},
                    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "refunds"}}]),
    Outcome(api="openai.chat", events=[{"choices": [{"delta": {"content": "Summary: "}}]},
                    {"choices": [{"delta": {"content": "refunds"}}]}]),
    Outcome(api="openai.responses", events=[{"type": "response.output_text.delta", "delta": "Summary: "},
                    {"type": "response.output_text.delta", "delta": "refunds"}]),
], ids=["anthropic", "chat", "responses", "anthropic-stream", "chat-stream", "responses-stream"])
def test_the_answer_text_is_read_from_every_api_and_stream(outcome):
    assert answer_text(outcome) == "Summary: refunds"
