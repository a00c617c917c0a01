"""ctxkit.instrument beyond the client it was given: the clients derived from it with
``with_options(...)`` / ``copy(...)``, OpenAI's resumed Responses stream
(``responses.stream(response_id=...)``), and an SDK whose private hook points moved.

As in test_instrument_helpers.py: the real anthropic / openai clients talk to the local stand-in
provider, the manifests go to a live ctxview server and are read back from its API."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import openai
import pytest
from anthropic.lib.streaming import MessageStream

import ctxkit
from tests.instrumentation.test_clients import anthropic_client, openai_client, run_in_own_loop, served_calls
from tests.instrumentation.test_helpers import CHAT, RESP, A, manifest_shape, served_by_agent
from tests.proxy.provider_standin import same_ids

RESUMED_ID = "resp_standin"  # the stand-in's response id


def _events(stream: Any) -> list:
    # warnings=False: the parsed response in response.completed warns on a plain dump
    return [e.model_dump(exclude_none=True, warnings=False) for e in stream]


@pytest.mark.django_db(transaction=True)
def test_clients_from_with_options_and_copy_record_their_calls_once(live_server, key, standin, sender):
    o = ctxkit.instrument(openai_client(standin.url), ctxkit_client=sender, run_id="derived-run")
    a = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, run_id="derived-run")
    plain = openai_client(standin.url).with_options(timeout=5, default_headers={"X-Team": "refunds"})

    o.chat.completions.create(**CHAT, ctxview={"agent": "parent"})
    tuned = o.with_options(timeout=5, default_headers={"X-Team": "refunds"})
    got = tuned.chat.completions.create(**CHAT, ctxview={"agent": "with_options"})
    sent = standin.headers[-1]
    assert same_ids(got.model_dump()) == same_ids(plain.chat.completions.create(**CHAT).model_dump())
    # The derived client's own options hold: its timeout, and its header reached the provider.
    assert (type(tuned), tuned.timeout, sent.get("x-team")) == (openai.OpenAI, 5, "refunds")
    o.copy(max_retries=1).responses.create(**RESP, ctxview={"agent": "copy"})
    tuned.with_options(timeout=7).chat.completions.create(**CHAT, ctxview={"agent": "derived twice"})
    # instrument() on a derived client changes nothing: its calls are recorded once.
    again = ctxkit.instrument(o.with_options(timeout=9), ctxkit_client=sender, run_id="derived-run")
    again.chat.completions.create(**CHAT, ctxview={"agent": "instrumented again"})
    o.chat.completions.create(**CHAT, ctxview={"agent": "parent after"})  # the parent is as it was

    with a.with_options(default_headers={"X-Team": "refunds"}).messages.stream(**A, ctxview={"agent": "a.stream"}) as s:
        s.get_final_message()
    a.copy(timeout=30).beta.messages.create(**A, ctxview={"agent": "a.copy.beta"})
    assert ctxkit.instrument.flush(20)

    calls = served_by_agent(live_server, key, "derived-run")  # one call per agent: none recorded twice
    assert set(calls) == {"parent", "with_options", "copy", "derived twice", "instrumented again", "parent after",
                          "a.stream", "a.copy.beta"}
    for name in ("with_options", "derived twice", "instrumented again", "parent after"):
        assert manifest_shape(calls[name]) == manifest_shape(calls["parent"]), name
    assert calls["copy"]["input_tokens"] == 1500 and calls["copy"]["output_reserve"] == 300
    assert manifest_shape(calls["a.stream"]) == manifest_shape(calls["a.copy.beta"])
    assert calls["a.stream"]["input_tokens"] == 1950 and calls["a.stream"]["finish_reason"] == "end_turn"


@pytest.mark.django_db(transaction=True)
def test_async_clients_from_with_options_and_copy_record_their_calls_once(live_server, key, standin, sender):
    o = ctxkit.instrument(openai_client(standin.url, openai.AsyncOpenAI), ctxkit_client=sender, run_id="aderived-run")
    a = ctxkit.instrument(anthropic_client(standin.url, anthropic.AsyncAnthropic), ctxkit_client=sender,
                          run_id="aderived-run")

    async def agent() -> None:
        await o.chat.completions.create(**CHAT, ctxview={"agent": "parent"})
        tuned = o.with_options(timeout=5, default_headers={"X-Team": "refunds"})
        assert type(tuned) is openai.AsyncOpenAI
        await tuned.chat.completions.create(**CHAT, ctxview={"agent": "with_options"})
        async with o.copy(max_retries=1).responses.stream(**RESP, ctxview={"agent": "copy.stream"}) as s:
            await s.get_final_response()
        await a.with_options(timeout=3).messages.create(**A, ctxview={"agent": "a.with_options"})

    run_in_own_loop(agent)
    assert ctxkit.instrument.flush(20)
    calls = served_by_agent(live_server, key, "aderived-run")
    assert set(calls) == {"parent", "with_options", "copy.stream", "a.with_options"}
    assert manifest_shape(calls["with_options"]) == manifest_shape(calls["parent"])
    assert calls["copy.stream"]["input_tokens"] == 1500 and calls["copy.stream"]["finish_reason"] == "completed"
    assert calls["a.with_options"]["input_tokens"] == 1950


def _resumed(call: dict) -> None:
    """A resumed stream's call: the response's usage, model, status, instructions; a warning."""
    assert (call["status"], call["model"], call["finish_reason"]) == ("ok", "gpt-4o", "completed")
    assert (call["input_tokens"], call["cache_read_tokens"], call["output_tokens"]) == (1500, 1024, 12)
    assert [(i["kind"], i["text"]) for i in call["items"]] == [("system", "Be brief.")]
    assert call["output_reserve"] == 300
    assert f"a resumed stream of response {RESUMED_ID}" in " ".join(call["warnings"])


@pytest.mark.django_db(transaction=True)
def test_a_resumed_responses_stream_is_recorded_from_the_response_it_streams(live_server, key, standin, sender):
    o = ctxkit.instrument(openai_client(standin.url), ctxkit_client=sender, run_id="resume-run")
    plain = openai_client(standin.url)
    o.responses.create(**RESP, ctxview={"agent": "create"})  # the stand-in keeps it as the stored response
    with o.responses.stream(response_id=RESUMED_ID, starting_after=2, ctxview={"agent": "resumed"}) as stream:
        events = _events(stream)
        final = stream.get_final_response()
    with plain.responses.stream(response_id=RESUMED_ID, starting_after=2) as stream:
        # The agent gets what it gets without ctxkit (the manager still skips the first events).
        assert (events, final.model_dump(warnings=False)) == (_events(stream),
                                                        stream.get_final_response().model_dump(warnings=False))
    assert events[0]["sequence_number"] == 3
    # retrieve(): a stored response read again is no model call; with stream=True it is the same
    # resumed stream as above.
    assert o.responses.retrieve(RESUMED_ID, ctxview={"agent": "retrieve"}).status == "completed"
    assert list(o.responses.retrieve(RESUMED_ID, stream=True, ctxview={"agent": "retrieve.stream"}))[-1].type == \
        "response.completed"
    ao = ctxkit.instrument(openai_client(standin.url, openai.AsyncOpenAI), ctxkit_client=sender, run_id="resume-run")

    async def agent() -> None:
        async with ao.responses.stream(response_id=RESUMED_ID, ctxview={"agent": "async resumed"}) as s:
            await s.get_final_response()

    run_in_own_loop(agent)
    assert ctxkit.instrument.flush(20)
    calls = served_by_agent(live_server, key, "resume-run")
    assert set(calls) == {"create", "resumed", "retrieve.stream", "async resumed"}
    for name in ("resumed", "retrieve.stream", "async resumed"):
        _resumed(calls[name])
    assert not calls["create"]["warnings"]


@pytest.mark.django_db(transaction=True)
def test_an_sdk_without_the_private_hook_points_runs_unrecorded_with_a_warning(live_server, key, standin, sender,
                                                                                monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="ctxkit")
    # Another SDK version: chat.completions' _post a class property that ignores assignment, so
    # instrument() cannot hook it.
    from openai.resources.chat.completions import Completions

    monkeypatch.setattr(Completions, "_post", property(lambda self: self._client.post, lambda self, value: None),
                        raising=False)
    o = ctxkit.instrument(openai_client(standin.url), ctxkit_client=sender, run_id="moved-run", agent="scope")
    assert "OpenAI.chat.completions has no _post to hook" in caplog.text
    assert o.chat.completions.create(**CHAT).usage.prompt_tokens == 2000  # works, unrecorded
    o.with_options(timeout=5).responses.create(**RESP, ctxview={"agent": "responses"})  # still recorded

    # Another SDK version: the stream manager keeps its request under another name, so the
    # per-call settings cannot be carried to it; the call is still recorded, under the scope's.
    class RenamedStreamManager:
        def __init__(self, api_request: Any, *, output_format: Any) -> None:
            self._request, self._format = api_request, output_format

        def __enter__(self) -> MessageStream:
            self._stream = MessageStream(self._request(), output_format=self._format)
            return self._stream

        def __exit__(self, *exc: Any) -> None:
            self._stream.close()

    monkeypatch.setattr("anthropic.resources.messages.messages.MessageStreamManager", RenamedStreamManager)
    a = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, run_id="moved-run", agent="scope")
    with a.messages.stream(**A, ctxview={"agent": "lost"}) as stream:
        assert stream.get_final_message().usage.output_tokens == 12
    assert "RenamedStreamManager keeps no __api_request" in caplog.text
    assert ctxkit.instrument.flush(20)
    calls = served_calls(live_server, key, "moved-run")
    assert sorted((c["agent"], c["provider"], c["input_tokens"]) for c in calls) == [
        ("responses", "openai", 1500), ("scope", "anthropic", 1950)]
