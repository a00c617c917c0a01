"""ctxkit.instrument with the real anthropic and openai clients pointed at a local stand-in
provider (tests/proxy/provider_standin.py); the manifests go through ctxkit's Client to a live
ctxview server, which then serves them on its read API."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import anthropic
import openai
import pytest

import ctxkit
from ctxkit import Client
from tests.proxy.provider_standin import same_ids

SYSTEM = "You are the refund analyst.\nCurrent time: {time}\nAnswer in English."
TOOLS = [{"name": "bi_query", "description": "Query the BI warehouse",
          "input_schema": {"type": "object", "properties": {"sql": {"type": "string"}}}}]
MESSAGES = [
    {"role": "user", "content": "Why did refunds rise in week 47?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "bi_query",
                                       "input": {"sql": "select rate from refunds"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                  "content": "refund_rate=0.0321", "cache_control": {"type": "ephemeral"}}]},
]
OPENAI_MESSAGES = [
    {"role": "system", "content": SYSTEM.format(time="12:47")},
    {"role": "user", "content": "Why did refunds rise?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "bi_query", "arguments": "{\"sql\": \"x\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "refund_rate=0.0321"},
    {"role": "user", "content": "Summarise for finance."},
]


def _get(live_server, key: str, path: str) -> dict:
    import json
    import urllib.request

    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def served_calls(live_server, key: str, run_id: str) -> list[dict]:
    calls = _get(live_server, key, f"/api/v1/runs/{run_id}/calls")["results"]
    return [_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for c in calls]


def run_in_own_loop(coroutine_function) -> None:
    """asyncio.run on a thread of its own: in a whole-suite run the browser tests' Playwright
    keeps an event loop running on the main thread, where asyncio.run refuses to start."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coroutine_function())
        except BaseException as exc:  # re-raised on the test's thread
            failure.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the async agent did not finish"
    if failure:
        raise failure[0]


def anthropic_client(url: str, cls=anthropic.Anthropic):
    return cls(api_key="sk-test", base_url=url, max_retries=0)


def openai_client(url: str, cls=openai.OpenAI):
    return cls(api_key="sk-test", base_url=f"{url}/v1", max_retries=0)


@pytest.mark.django_db(transaction=True)
def test_it_records_anthropic_calls_that_the_live_server_then_serves(live_server, key, standin, sender):
    plain = anthropic_client(standin.url)
    client = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, agent="refund-analyst")
    request = dict(model="claude-sonnet-5-5", max_tokens=512, tools=TOOLS, messages=MESSAGES,
                   system=[{"type": "text", "text": SYSTEM.format(time="12:47"),
                            "cache_control": {"type": "ephemeral"}}])
    with ctxkit.instrument.run(run_id="a-run", evidence={"refund_rate": "0.0321", "owner": "finance-owner"}):
        got = client.messages.create(**request)
        streamed = list(client.messages.create(**request, stream=True))
        with pytest.raises(anthropic.RateLimitError):
            client.messages.create(**{**request, "model": "rate-limited"})
        with pytest.raises(anthropic.InternalServerError):
            client.messages.create(**{**request, "model": "broken"})
        client.beta.messages.create(**request, context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
                                    betas=["context-management-2025-06-27"], ctxview={"agent": "compactor"})
    # What the agent sees is what the SDK returns without ctxkit (each answer's own id set aside).
    assert type(got) is anthropic.types.Message
    assert same_ids(got.model_dump()) == same_ids(plain.messages.create(**request).model_dump())
    assert same_ids([e.model_dump() for e in streamed]) == same_ids(
        [e.model_dump() for e in plain.messages.create(**request, stream=True)])
    assert ctxkit.instrument.flush(20)

    calls = served_calls(live_server, key, "a-run")
    assert [c["step"] for c in calls] == [0, 1, 2, 3, 4]
    first, stream, limited, broken, beta = calls
    # A call is stored under the id of the message that answered it; a failed one under its own.
    assert (first["call_id"], stream["call_id"]) == (got.id, streamed[0].message.id)
    assert not limited["call_id"].startswith("msg_")
    assert (first["agent"], first["model"], first["provider"], beta["agent"]) == (
        "refund-analyst", "claude-sonnet-5-5", "anthropic", "compactor")
    # Anthropic's input_tokens (50) is the uncached part: normal form adds the cache beside it.
    for c in (first, stream):
        assert (c["input_tokens"], c["cache_read_tokens"], c["cache_write_tokens"], c["output_tokens"]) == (
            1950, 1800, 100, 12)
        assert c["finish_reason"] == "end_turn" and c["status"] == "ok"
    assert (limited["status"], limited["input_tokens"]) == ("error", 0) and "429" in limited["warnings"][0]
    assert broken["status"] == "error" and "500" in broken["warnings"][0]
    kinds = [(i["kind"], i["group"]) for i in first["items"]]
    assert kinds == [("tools", None), ("system", None), ("task", None), ("history", "tu_1"), ("tool_result", "tu_1")]
    assert first["items"][4]["trust"] == "untrusted" and first["items"][1]["used_tokens"] > 0
    assert [s["name"] for s in first["prefix_segments"]] == ["tools", "system", "messages"]
    assert first["prefix_segments"][1]["text"].split("\n")[1] == "Current time: 12:47"
    assert len(first["prefix_segments"][1]["lines"]) == 3
    evidence = {e["key"]: e["present"] for e in first["evidence"]}
    assert evidence == {"refund_rate": True, "owner": False}
    assert beta["context_edits"][0]["type"] == "clear_tool_uses" and beta["context_edits"][0]["cleared_tokens"] == 4200
    assert beta["compactions"][0]["tokens_before"] == 90000
    assert first["ended_at"] >= first["started_at"]


@pytest.mark.django_db(transaction=True)
def test_it_records_openai_chat_and_responses_calls(live_server, key, standin, sender):
    plain = openai_client(standin.url)
    client = ctxkit.instrument(openai_client(standin.url), ctxkit_client=sender, agent="analyst", run_id="o-run")
    tools = [{"type": "function", "function": {"name": "bi_query", "parameters": {"type": "object"}}}]
    got = client.chat.completions.create(model="gpt-4o", messages=OPENAI_MESSAGES, tools=tools)
    assert same_ids(got.model_dump()) == same_ids(plain.chat.completions.create(
        model="gpt-4o", messages=OPENAI_MESSAGES, tools=tools).model_dump())
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=OPENAI_MESSAGES, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens == 2000
    response = client.responses.create(model="gpt-4o", instructions="Be brief.", input="Summarise.",
                                       max_output_tokens=300)
    assert response.output_text == plain.responses.create(model="gpt-4o", input="Summarise.").output_text
    events = list(client.responses.create(model="gpt-4o", input="Summarise.", stream=True))
    assert events[-1].type == "response.completed"
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="rate-limited", messages=OPENAI_MESSAGES)
    with pytest.raises(openai.InternalServerError):
        client.responses.create(model="broken", input="x")
    assert ctxkit.instrument.flush(20)

    chat, chat_stream, resp, resp_stream, limited, broken = served_calls(live_server, key, "o-run")
    assert (chat["call_id"], chat_stream["call_id"], resp["call_id"], resp_stream["call_id"]) == (
        got.id, chunks[0].id, response.id, events[-1].response.id)
    for c in (chat, chat_stream):
        assert (c["input_tokens"], c["cache_read_tokens"], c["output_tokens"]) == (2000, 1024, 12)
        assert c["finish_reason"] == "stop"
    assert [(i["kind"], i["group"]) for i in chat["items"]] == [
        ("tools", None), ("system", None), ("task", None), ("history", "call_1"), ("tool_result", "call_1"),
        ("user", None)]
    assert [s["name"] for s in chat["prefix_segments"]] == ["system", "tools", "messages"]
    for c in (resp, resp_stream):
        assert (c["input_tokens"], c["cache_read_tokens"], c["reasoning_tokens"]) == (1500, 1024, 4)
    assert resp["output_reserve"] == 300 and resp["items"][0]["kind"] == "system"
    assert limited["status"] == broken["status"] == "error"


@pytest.mark.django_db(transaction=True)
def test_it_records_calls_of_the_async_clients_streams_included(live_server, key, standin, sender):
    a = ctxkit.instrument(anthropic_client(standin.url, anthropic.AsyncAnthropic), ctxkit_client=sender)
    o = ctxkit.instrument(openai_client(standin.url, openai.AsyncOpenAI), ctxkit_client=sender)

    async def agent() -> None:
        with ctxkit.instrument.run(run_id="async-run", agent="async-agent"):
            message = await a.messages.create(model="claude-sonnet-5-5", max_tokens=64, messages=MESSAGES[:1])
            assert isinstance(message, anthropic.types.Message)
            stream = await a.messages.create(model="claude-sonnet-5-5", max_tokens=64, messages=MESSAGES[:1],
                                             stream=True)
            assert isinstance(stream, anthropic.AsyncStream)
            assert [e.type async for e in stream][-1] == "message_stop"
            chunks = await o.chat.completions.create(model="gpt-4o", messages=OPENAI_MESSAGES, stream=True,
                                                     stream_options={"include_usage": True})
            assert [c async for c in chunks][-1].usage.total_tokens == 2012
            with pytest.raises(openai.RateLimitError):
                await o.responses.create(model="rate-limited", input="x")

    run_in_own_loop(agent)
    assert ctxkit.instrument.flush(20)
    calls = served_calls(live_server, key, "async-run")
    assert [(c["provider"], c["status"], c["input_tokens"]) for c in calls] == [
        ("anthropic", "ok", 1950), ("anthropic", "ok", 1950), ("openai", "ok", 2000), ("openai", "error", 0)]
    assert {c["agent"] for c in calls} == {"async-agent"}


def test_it_is_a_no_op_without_a_key(standin, monkeypatch):
    monkeypatch.delenv("CTXVIEW_API_KEY", raising=False)
    client = anthropic_client(standin.url)
    assert ctxkit.instrument(client) is client
    assert not getattr(client.messages.create, "__ctxkit_wrapped__", False)
    assert client.messages.create(model="m", max_tokens=5, messages=MESSAGES[:1]).content[0].text


def test_it_never_raises_into_the_agent_when_ctxview_is_down(standin):
    # Nothing listens on port 9 (discard); the agent's calls work and return as usual.
    down = Client("ctx_nobody", "http://127.0.0.1:9", max_retries=0, timeout=0.2)
    client = ctxkit.instrument(openai_client(standin.url), ctxkit_client=down)
    assert client.chat.completions.create(model="gpt-4o", messages=OPENAI_MESSAGES).usage.prompt_tokens == 2000
    ctxkit.instrument.flush(5)
    assert down.stats()["captured"] >= 1 and down.stats()["sent"] == 0
    down.shutdown(timeout=1)


def test_importing_ctxkit_loads_neither_django_nor_the_provider_sdks():
    code = ("import sys, ctxkit; ctxkit.instrument; import ctxkit.instrumentation; assert callable(ctxkit.instrument); "
            "print(sorted(n for n in ('django', 'anthropic', 'openai') if n in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "[]"


@pytest.mark.django_db(transaction=True)
def test_it_sends_with_the_key_and_host_from_the_environment(live_server, key, standin, monkeypatch):
    monkeypatch.setenv("CTXVIEW_API_KEY", key)
    monkeypatch.setenv("CTXVIEW_HOST", live_server.url)
    client = ctxkit.instrument(openai_client(standin.url), agent="env-agent", run_id="env-run", include_text=False)
    client.chat.completions.create(model="gpt-4o", messages=OPENAI_MESSAGES)
    assert ctxkit.instrument.flush(20)
    (call,) = served_calls(live_server, key, "env-run")
    assert call["agent"] == "env-agent" and call["input_tokens"] == 2000
    # include_text=False: tokens and line hashes, never text.
    assert all(i["text"] is None for i in call["items"]) and call["items"][0]["used_tokens"] > 0
    assert call["prefix_segments"][0]["lines"] and "text" not in call["prefix_segments"][0]
