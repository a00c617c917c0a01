"""ctxkit.instrument and the SDKs' other entry points: Anthropic ``messages.stream`` /
``messages.parse`` (and beta), OpenAI ``chat.completions.parse`` / ``stream`` and
``responses.parse`` / ``stream``, and ``with_raw_response`` / ``with_streaming_response``.

The real anthropic / openai clients talk to the local stand-in provider (tests/proxy/provider_standin.py);
the manifests go to a live ctxview server. Each entry point's stored call must match the one of
the plain ``create`` call with the same request (usage, items, finish reason), and the agent must
get from it exactly what the same entry point gives without ctxkit."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pydantic
import pytest

import ctxkit
from tests.instrumentation.test_clients import (
    MESSAGES,
    OPENAI_MESSAGES,
    SYSTEM,
    TOOLS,
    anthropic_client,
    openai_client,
    run_in_own_loop,
    served_calls,
)
from tests.proxy.provider_standin import same_ids


class Rate(pydantic.BaseModel):
    rate: str


A = dict(model="claude-sonnet-5-5", max_tokens=512, tools=TOOLS, messages=MESSAGES,
         system=[{"type": "text", "text": SYSTEM.format(time="12:47"), "cache_control": {"type": "ephemeral"}}])
OPENAI_TOOLS = [{"type": "function", "function": {  # strict: parse() and stream() refuse others
    "name": "bi_query", "strict": True, "parameters": {"type": "object", "properties": {"sql": {"type": "string"}},
                                                       "required": ["sql"], "additionalProperties": False}}}]
CHAT = dict(model="gpt-4o", messages=OPENAI_MESSAGES, tools=OPENAI_TOOLS, max_completion_tokens=300)
USAGE = {"stream_options": {"include_usage": True}}  # a streamed Chat Completion's usage
RESP = dict(model="gpt-4o", instructions="Be brief.", input="Summarise.", max_output_tokens=300)


def _message(m: Any) -> tuple:
    """What the agent got, comparable between two clients (each answer's own id set aside)."""
    return type(m).__name__, same_ids(m.model_dump(exclude_none=True, warnings=False))


def _events(stream: Any) -> list:
    return same_ids([e.model_dump(exclude_none=True) for e in stream])


async def _aevents(stream: Any) -> list:
    return same_ids([e.model_dump(exclude_none=True) async for e in stream])


def _stream(manager: Any, final: str) -> tuple:
    with manager as stream:
        return _message(getattr(stream, final)())


async def _astream(manager: Any, final: str) -> tuple:
    async with manager as stream:
        return _message(await getattr(stream, final)())


def _streaming(manager: Any, read: Callable[[Any], Any]) -> tuple:
    with manager as response:
        return type(response).__name__, read(response.parse())


async def _astreaming(manager: Any, read: Callable[[Any], Any]) -> tuple:
    async with manager as response:
        return type(response).__name__, await read(await response.parse())


def _raw(response: Any, read: Callable[[Any], Any]) -> tuple:
    return type(response).__name__, read(response.parse())


async def _araw(pending: Any, read: Callable[[Any], Any]) -> tuple:
    response = await pending
    return type(response).__name__, await read(await response.parse())


async def _amessage(pending: Any) -> tuple:
    return _message(await pending)


_ANTHROPIC: dict[str, Callable[[Any], Any]] = {
    "messages.stream": lambda c: _stream(c.messages.stream(**A), "get_final_message"),
    "beta.messages.stream": lambda c: _stream(c.beta.messages.stream(**A), "get_final_message"),
    "messages.parse": lambda c: _message(c.messages.parse(**A, output_format=Rate)),
    "beta.messages.parse": lambda c: _message(c.beta.messages.parse(**A)),
    "with_raw_response.create": lambda c: _raw(c.messages.with_raw_response.create(**A), _message),
    "with_raw_response.create(stream=True)": lambda c: _raw(c.messages.with_raw_response.create(**A, stream=True),
                                                            _events),
    "with_streaming_response.create": lambda c: _streaming(c.messages.with_streaming_response.create(**A), _message),
    "with_streaming_response.create(stream=True)": lambda c: _streaming(
        c.messages.with_streaming_response.create(**A, stream=True), _events),
    "beta.messages.with_raw_response.create": lambda c: _raw(c.beta.messages.with_raw_response.create(**A),
                                                             _message),
}
_OPENAI: dict[str, Callable[[Any], Any]] = {
    "chat.completions.parse": lambda c: _message(c.chat.completions.parse(**CHAT, response_format=Rate)),
    "chat.completions.stream": lambda c: _stream(c.chat.completions.stream(**CHAT, **USAGE), "get_final_completion"),
    "chat.completions.with_raw_response.create": lambda c: _raw(c.chat.completions.with_raw_response.create(**CHAT),
                                                                _message),
    "chat.completions.with_raw_response.parse": lambda c: _raw(
        c.chat.completions.with_raw_response.parse(**CHAT, response_format=Rate), _message),
    "chat.completions.with_streaming_response.create(stream=True)": lambda c: _streaming(
        c.chat.completions.with_streaming_response.create(**CHAT, **USAGE, stream=True), _events),
    "responses.parse": lambda c: _message(c.responses.parse(**RESP, text_format=Rate)),
    "responses.stream": lambda c: _stream(c.responses.stream(**RESP), "get_final_response"),
    "responses.with_streaming_response.create": lambda c: _streaming(
        c.responses.with_streaming_response.create(**RESP), _message),
    "responses.with_raw_response.create(stream=True)": lambda c: _raw(
        c.responses.with_raw_response.create(**RESP, stream=True), _events),
}
_ASYNC_ANTHROPIC: dict[str, Callable[[Any], Any]] = {
    "messages.stream": lambda c: _astream(c.messages.stream(**A), "get_final_message"),
    "messages.parse": lambda c: _amessage(c.messages.parse(**A, output_format=Rate)),
    "with_raw_response.create": lambda c: _araw(c.messages.with_raw_response.create(**A), _amessage_now),
    "with_streaming_response.create(stream=True)": lambda c: _astreaming(
        c.messages.with_streaming_response.create(**A, stream=True), _aevents),
}
_ASYNC_OPENAI: dict[str, Callable[[Any], Any]] = {
    "chat.completions.parse": lambda c: _amessage(c.chat.completions.parse(**CHAT, response_format=Rate)),
    "chat.completions.stream": lambda c: _astream(c.chat.completions.stream(**CHAT, **USAGE), "get_final_completion"),
    "chat.completions.with_streaming_response.create": lambda c: _astreaming(
        c.chat.completions.with_streaming_response.create(**CHAT), _amessage_now),
    "responses.stream": lambda c: _astream(c.responses.stream(**RESP), "get_final_response"),
}


async def _amessage_now(m: Any) -> tuple:
    return _message(m)


def _baseline(name: str, provider: str) -> Callable[[Any], Any]:
    """The plain create call with the same request as the entry point ``name``."""
    if provider == "anthropic":
        return lambda c: (c.beta.messages if name.startswith("beta.") else c.messages).create(**A)
    if name.startswith("responses."):
        return lambda c: c.responses.create(**RESP)
    return lambda c: c.chat.completions.create(**CHAT)


def manifest_shape(call: dict) -> tuple:
    """What must be the same as the plain create call's manifest."""
    return (call["status"], call["finish_reason"], call["input_tokens"], call["cache_read_tokens"],
            call["cache_write_tokens"], call["output_tokens"], call["reasoning_tokens"], call["provider"],
            call["model"], [(i["kind"], i["group"], i["text"], i["used_tokens"]) for i in call["items"]],
            [(s["name"], s["lines"]) for s in call["prefix_segments"]], call["output_reserve"])


def served_by_agent(live_server, key: str, run_id: str) -> dict[str, dict]:
    calls = served_calls(live_server, key, run_id)
    by_agent = {c["agent"]: c for c in calls}
    assert len(by_agent) == len(calls), [c["agent"] for c in calls]
    return by_agent


def _check(live_server, key: str, sender, make: Callable[[], Any], name: str, entry: Callable[[Any], Any],
           baseline: Callable[[Any], Any], run_id: str, is_async: bool) -> None:
    plain, client = make(), ctxkit.instrument(make(), ctxkit_client=sender)
    got: dict[str, Any] = {}

    async def agent() -> None:
        with ctxkit.instrument.run(run_id=run_id, agent="create"):
            await baseline(client)
        with ctxkit.instrument.run(run_id=run_id, agent="entry"):
            got["instrumented"] = await entry(client)
        got["plain"] = await entry(plain)

    if is_async:
        run_in_own_loop(agent)
    else:
        with ctxkit.instrument.run(run_id=run_id, agent="create"):
            baseline(client)
        with ctxkit.instrument.run(run_id=run_id, agent="entry"):
            got["instrumented"] = entry(client)
        got["plain"] = entry(plain)
    # The agent gets what the same entry point gives without ctxkit (type and content).
    assert got["instrumented"] == got["plain"]
    assert ctxkit.instrument.flush(20)
    calls = served_by_agent(live_server, key, run_id)
    assert set(calls) == {"create", "entry"}, f"{name} was not recorded"
    assert manifest_shape(calls["entry"]) == manifest_shape(calls["create"])
    assert calls["entry"]["output_tokens"] > 0 and calls["entry"]["finish_reason"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", list(_ANTHROPIC))
def test_an_anthropic_entry_point_is_recorded_like_create(live_server, key, standin, sender, name):
    _check(live_server, key, sender, lambda: anthropic_client(standin.url), name, _ANTHROPIC[name],
           _baseline(name, "anthropic"), f"a-{name}", False)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", list(_OPENAI))
def test_an_openai_entry_point_is_recorded_like_create(live_server, key, standin, sender, name):
    _check(live_server, key, sender, lambda: openai_client(standin.url), name, _OPENAI[name],
           _baseline(name, "openai"), f"o-{name}", False)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", list(_ASYNC_ANTHROPIC))
def test_an_async_anthropic_entry_point_is_recorded_like_create(live_server, key, standin, sender, name):
    _check(live_server, key, sender, lambda: anthropic_client(standin.url, anthropic.AsyncAnthropic), name,
           _ASYNC_ANTHROPIC[name], _baseline(name, "anthropic"), f"aa-{name}", True)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", list(_ASYNC_OPENAI))
def test_an_async_openai_entry_point_is_recorded_like_create(live_server, key, standin, sender, name):
    _check(live_server, key, sender, lambda: openai_client(standin.url, openai.AsyncOpenAI), name, _ASYNC_OPENAI[name],
           _baseline(name, "openai"), f"ao-{name}", True)


@pytest.mark.django_db(transaction=True)
def test_ctxview_reaches_requests_made_after_the_method_returned(live_server, key, standin, sender):
    # A stream manager sends its request on enter, an async method when awaited: the per-call
    # settings given to the method still apply, and never reach the SDK.
    a = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, run_id="ctxview-run")
    o = ctxkit.instrument(openai_client(standin.url), ctxkit_client=sender, run_id="ctxview-run")
    with a.messages.stream(**A, ctxview={"agent": "a.stream"}) as stream:
        stream.until_done()
    with o.chat.completions.stream(**CHAT, **USAGE, ctxview={"agent": "o.chat.stream"}) as stream:
        stream.until_done()
    with o.responses.stream(**RESP, ctxview={"agent": "o.responses.stream"}) as stream:
        stream.until_done()
    with a.messages.with_streaming_response.create(**A, ctxview={"agent": "a.streaming"}) as response:
        response.parse()
    aa = ctxkit.instrument(anthropic_client(standin.url, anthropic.AsyncAnthropic), ctxkit_client=sender,
                           run_id="ctxview-run")
    ao = ctxkit.instrument(openai_client(standin.url, openai.AsyncOpenAI), ctxkit_client=sender, run_id="ctxview-run")

    async def agent() -> None:
        pending = aa.messages.parse(**A, ctxview={"agent": "aa.parse"})
        await asyncio.sleep(0)
        await pending
        async with aa.messages.stream(**A, ctxview={"agent": "aa.stream"}) as s:
            await s.until_done()
        async with ao.chat.completions.stream(**CHAT, **USAGE, ctxview={"agent": "ao.chat.stream"}) as s:
            await s.until_done()

    run_in_own_loop(agent)
    assert ctxkit.instrument.flush(20)
    calls = served_by_agent(live_server, key, "ctxview-run")
    assert set(calls) == {"a.stream", "o.chat.stream", "o.responses.stream", "a.streaming", "aa.parse",
                          "aa.stream", "ao.chat.stream"}
    assert all(c["status"] == "ok" and c["input_tokens"] > 0 for c in calls.values())


@pytest.mark.django_db(transaction=True)
def test_an_unread_streaming_response_is_left_unread_and_other_endpoints_pass_through(live_server, key, standin,
                                                                                      sender):
    client = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, run_id="unread-run", agent="unread")
    with client.messages.with_streaming_response.create(**A) as unread:
        pass  # the agent never reads the body
    with pytest.raises(Exception, match="read"):  # ctxkit did not read it either
        unread.http_response.content  # noqa: B018
    assert client.messages.count_tokens(model=A["model"], messages=MESSAGES).input_tokens == 1950
    assert ctxkit.instrument.flush(20)
    (call,) = served_calls(live_server, key, "unread-run")  # count_tokens is no model call
    # Recorded from its request alone: the items, no usage and no finish reason.
    assert call["status"] == "ok" and not call["finish_reason"] and call["output_tokens"] == 0
    assert "the agent did not read the response body" in " ".join(call["warnings"])
    assert [i["kind"] for i in call["items"]] == ["tools", "system", "task", "history", "tool_result"]
