"""ctxkit proxy with the real anthropic and openai clients: through the proxy they receive
exactly what they receive straight from the provider (tests/proxy/provider_standin.py), bodies and
stream bytes alike, and the calls reach a live ctxview server as manifests, in the runs and
steps the agent had. One proxy serves the module; each test points its recorder at the test's
own ctxview project."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import anthropic
import msgspec
import openai
import pytest

import ctxkit
from tests.proxy.provider_standin import StandIn, same_ids
from tests.proxy.proxy_support import KeptManifests, running_proxy

SYSTEM = [{"type": "text", "text": "You are the refund analyst.\nAnswer in English.",
           "cache_control": {"type": "ephemeral"}}]
TOOLS = [{"name": "bi_query", "description": "Query the BI warehouse",
          "input_schema": {"type": "object", "properties": {"sql": {"type": "string"}}}}]
LEAKED = "sk-ant-api03-LEAKEDLEAKEDLEAKEDLEAKED"
TURN_1 = [{"role": "user", "content": "Why did refunds rise in week 47?"}]
TURN_2 = [*TURN_1,
          {"role": "assistant", "content": [{"type": "tool_use", "id": "tu_1", "name": "bi_query",
                                             "input": {"sql": "select rate from refunds"}}]},
          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                        "content": f"refund_rate=0.0321 (ANTHROPIC_API_KEY={LEAKED})",
                                        "cache_control": {"type": "ephemeral"}}]}]
TURN_3 = [*TURN_2, {"role": "assistant", "content": "The rate is 0.0321."},
          {"role": "user", "content": "And in week 48?"}]
CLEAN = [*TURN_1, TURN_2[1], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu_1",
                                                           "content": "refund_rate=0.0321"}]}]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why did refunds rise?"}]


@pytest.fixture(scope="module")
def provider():
    with StandIn() as server:
        yield server


@pytest.fixture(scope="module")
def proxy(provider):
    with running_proxy(provider.url, None) as running:
        yield running


@pytest.fixture
def recording(proxy, sender):
    """The module's proxy records into this test's ctxview project."""
    proxy.capture.sink = sender
    proxy.capture.include_text = True
    yield proxy
    proxy.capture.flush(10)
    proxy.capture.sink = None


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _runs(live_server, key: str, proxy, calls: int, timeout: float = 15) -> dict[str, list[dict]]:
    """run id -> its calls in step order, once ``calls`` calls have arrived at ctxview."""
    deadline = time.monotonic() + timeout
    while True:
        proxy.capture.flush(2)
        runs = {r["run_id"]: r for r in _get(live_server, key, "/api/v1/runs?page_size=100")["results"]}
        got = {run_id: [_get(live_server, key, f"/api/v1/calls/{c['call_id']}")
                        for c in _get(live_server, key, f"/api/v1/runs/{run_id}/calls")["results"]]
               for run_id in runs}
        if sum(len(v) for v in got.values()) >= calls or time.monotonic() > deadline:
            return {run_id: sorted(v, key=lambda c: c["step"]) for run_id, v in got.items()}
        time.sleep(0.05)


def _anthropic(url: str, **kwargs) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-ant-api03-CLIENTKEYCLIENTKEYCLIENT", base_url=url, max_retries=0, **kwargs)


def _openai(url: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-proj-CLIENTKEYCLIENTKEYCLIENT", base_url=f"{url}/v1", max_retries=0, **kwargs)


@pytest.mark.django_db(transaction=True)
def test_anthropic_client_gets_what_it_gets_directly_and_the_conversation_is_one_run(live_server, key, provider,
                                                                                      recording):
    direct, through = _anthropic(provider.url), _anthropic(recording.url)
    request = dict(model="claude-sonnet-5-5", max_tokens=512, system=SYSTEM, tools=TOOLS)

    # Not streamed: the same bytes, the same parsed message.
    raw_direct = direct.messages.with_raw_response.create(**request, messages=TURN_1)
    raw_through = through.messages.with_raw_response.create(**request, messages=TURN_1)
    # (each answer has an id of its own: the ids are set aside)
    assert same_ids(raw_through.http_response.content) == same_ids(raw_direct.http_response.content)
    assert raw_through.status_code == raw_direct.status_code == 200
    assert raw_through.headers["content-type"] == raw_direct.headers["content-type"]
    assert same_ids(raw_through.parse().model_dump()) == same_ids(raw_direct.parse().model_dump())

    # Streamed: the same bytes, the same events.
    with direct.messages.with_streaming_response.create(**request, messages=TURN_2, stream=True) as d, \
            through.messages.with_streaming_response.create(**request, messages=TURN_2, stream=True) as t:
        assert same_ids(b"".join(t.iter_bytes())) == same_ids(b"".join(d.iter_bytes()))
    streamed = [e.model_dump() for e in through.messages.create(**request, messages=TURN_3, stream=True)]
    assert same_ids(streamed) == same_ids([e.model_dump() for e in direct.messages.create(
        **request, messages=TURN_3, stream=True)])

    # beta.messages (?beta=true) and an error status, continuing the conversation.
    beta = through.beta.messages.create(**request, messages=[*TURN_3, {"role": "assistant", "content": "Same."},
                                                             {"role": "user", "content": "Thanks."}],
                                        context_management={"edits": [{"type": "clear_tool_uses_20250919"}]},
                                        betas=["context-management-2025-06-27"])
    assert beta.usage.cache_read_input_tokens == 1800
    with pytest.raises(anthropic.RateLimitError) as limited:
        through.messages.create(**{**request, "model": "rate-limited"}, messages=[*TURN_3, {
            "role": "assistant", "content": "Same."}, {"role": "user", "content": "Again?"}])
    assert limited.value.status_code == 429 and limited.value.response.headers["retry-after"] == "0"

    # Other paths pass through unrecorded.
    assert through.messages.count_tokens(model="m", messages=TURN_1).input_tokens == 1950
    with pytest.raises(anthropic.NotFoundError):
        through.models.list()

    runs = _runs(live_server, key, recording, calls=5)
    assert len(runs) == 1, runs.keys()
    (calls,) = runs.values()
    assert [c["step"] for c in calls] == [0, 1, 2, 3, 4]
    first, second, third, beta_call, limited_call = calls
    # A call is stored under the id of the message it was answered with.
    assert (first["call_id"], third["call_id"], beta_call["call_id"]) == (
        raw_through.parse().id, streamed[0]["message"]["id"], beta.id)
    assert {c["agent"] for c in calls} == {"Anthropic"}  # the client's product, from its User-Agent
    for c in (first, second, third):
        assert (c["input_tokens"], c["cache_read_tokens"], c["cache_write_tokens"], c["output_tokens"]) == (
            1950, 1800, 100, 12)
        assert (c["status"], c["finish_reason"], c["provider"], c["model"]) == (
            "ok", "end_turn", "anthropic", "claude-sonnet-5-5")
    assert [(i["kind"], i["group"]) for i in second["items"]] == [
        ("tools", None), ("system", None), ("task", None), ("history", "tu_1"), ("tool_result", "tu_1")]
    assert [s["name"] for s in second["prefix_segments"]] == ["tools", "system", "messages"]
    # A key inside the context is masked before the manifest leaves the proxy.
    assert second["items"][4]["text"] == "refund_rate=0.0321 (ANTHROPIC_API_KEY=[masked:anthropic-key])"
    assert LEAKED not in json.dumps(calls) and "CLIENTKEY" not in json.dumps(calls)
    assert beta_call["context_edits"][0]["type"] == "clear_tool_uses"
    assert beta_call["compactions"][0]["tokens_before"] == 90000
    assert limited_call["status"] == "error" and "error: ProviderError (HTTP 429)" in limited_call["warnings"]


@pytest.mark.django_db(transaction=True)
def test_openai_client_gets_what_it_gets_directly_and_the_run_header_names_the_run(live_server, key, provider,
                                                                                    recording):
    direct = _openai(provider.url)
    through = _openai(recording.url, default_headers={"X-Ctxview-Run": "o-run", "X-Ctxview-Agent": "support-bot"})
    tools = [{"type": "function", "function": {"name": "bi_query", "parameters": {"type": "object"}}}]

    raw = [c.chat.completions.with_raw_response.create(model="gpt-4o", messages=CHAT, tools=tools)
           for c in (direct, through)]
    assert same_ids(raw[1].http_response.content) == same_ids(raw[0].http_response.content)
    for make in (
        lambda c: c.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=CHAT, stream=True, stream_options={"include_usage": True}),
        lambda c: c.responses.with_streaming_response.create(model="gpt-4o", input="Summarise.", stream=True),
    ):
        with make(direct) as d, make(through) as t:
            assert same_ids(b"".join(t.iter_bytes())) == same_ids(b"".join(d.iter_bytes()))
    response = through.responses.create(model="gpt-4o", instructions="Be brief.", input="Summarise.",
                                        max_output_tokens=300)
    assert same_ids(response.model_dump()) == same_ids(direct.responses.create(
        model="gpt-4o", instructions="Be brief.", input="Summarise.", max_output_tokens=300).model_dump())
    events = [e.model_dump() for e in through.responses.create(model="gpt-4o", input="Summarise.", stream=True)]
    assert same_ids(events) == same_ids([e.model_dump() for e in direct.responses.create(
        model="gpt-4o", input="Summarise.", stream=True)])
    with pytest.raises(openai.InternalServerError):
        through.chat.completions.create(model="broken", messages=CHAT)

    runs = _runs(live_server, key, recording, calls=6)
    assert list(runs) == ["o-run"]
    calls = runs["o-run"]
    assert [c["step"] for c in calls] == [0, 1, 2, 3, 4, 5]
    chat, chat_stream, resp_stream, resp, resp_stream_2, broken = calls
    assert (chat["call_id"], resp["call_id"], resp_stream_2["call_id"]) == (
        raw[1].parse().id, response.id, events[0]["response"]["id"])
    assert {c["agent"] for c in calls} == {"support-bot"}
    for c in (chat, chat_stream):
        assert (c["input_tokens"], c["cache_read_tokens"], c["output_tokens"], c["finish_reason"]) == (
            2000, 1024, 12, "stop")
    for c in (resp_stream, resp, resp_stream_2):
        assert (c["input_tokens"], c["cache_read_tokens"], c["reasoning_tokens"]) == (1500, 1024, 4)
    assert resp["output_reserve"] == 300 and resp["items"][0]["kind"] == "system"
    assert broken["status"] == "error" and "error: ProviderError (HTTP 500)" in broken["warnings"]


@pytest.mark.django_db(transaction=True)
def test_claude_code_session_ids_name_the_run_and_no_text_records_hashes_only(live_server, key, provider,
                                                                              recording):
    recording.capture.include_text = False
    session = "5f1c7a9e-0b1d-4c3e-9a41-2d7b6c0e8f11"
    user_id = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": session})
    by_metadata = _anthropic(recording.url)
    by_header = _anthropic(recording.url, default_headers={"X-Claude-Code-Session-Id": session,
                                                           "User-Agent": "claude-cli/2.1.332 (external, sdk-cli)"})
    by_metadata.messages.create(model="claude-sonnet-5-5", max_tokens=64, messages=TURN_1, system=SYSTEM,
                                metadata={"user_id": user_id})
    by_header.messages.create(model="claude-haiku-4-5", max_tokens=64, messages=[
        {"role": "user", "content": "Write a title for this conversation."}])

    runs = _runs(live_server, key, recording, calls=2)
    assert list(runs) == [f"session-{session}"]
    first, second = runs[f"session-{session}"]
    assert (first["step"], second["step"], second["agent"]) == (0, 1, "claude-cli")
    assert all(i["text"] is None for c in (first, second) for i in c["items"])
    assert first["items"][0]["used_tokens"] > 0 and first["prefix_segments"][0]["lines"]
    assert "text" not in first["prefix_segments"][0]


def test_the_proxy_maps_a_call_as_instrument_does(provider):
    """One mapping: the manifest the proxy records from the bytes equals the one
    ctxkit.instrument records from the SDK's objects, for the same call."""
    by_proxy, by_instrument = KeptManifests(), KeptManifests()
    with running_proxy(provider.url, by_proxy) as proxy:
        through = _anthropic(proxy.url, default_headers={"X-Ctxview-Run": "same"})
        instrumented = ctxkit.instrument(_anthropic(provider.url), ctxkit_client=by_instrument, run_id="same")
        o_through = _openai(proxy.url, default_headers={"X-Ctxview-Run": "same"})
        o_instrumented = ctxkit.instrument(_openai(provider.url), ctxkit_client=by_instrument, run_id="same")
        for client in (through, instrumented):
            client.messages.create(model="claude-sonnet-5-5", max_tokens=512, system=SYSTEM, tools=TOOLS,
                                   messages=CLEAN)
            list(client.messages.create(model="claude-sonnet-5-5", max_tokens=512, system=SYSTEM, tools=TOOLS,
                                        messages=CLEAN, stream=True))
        for client in (o_through, o_instrumented):
            list(client.chat.completions.create(model="gpt-4o", messages=CHAT, stream=True,
                                                stream_options={"include_usage": True}))
            list(client.responses.create(model="gpt-4o", instructions="Be brief.", input="Summarise.",
                                         stream=True))
        assert ctxkit.instrument.flush(10)
        deadline = time.monotonic() + 10
        while len(by_proxy.manifests) < 4 and time.monotonic() < deadline:
            proxy.capture.flush(1)
    assert len(by_proxy.manifests) == len(by_instrument.manifests) == 4

    def comparable(m) -> dict:
        keep = ("model", "provider", "run_id", "step", "budget", "prefix", "usage", "items", "evidence",
                "context_edits", "compactions", "outcome")
        data = msgspec.to_builtins(m)
        return {k: data.get(k) for k in keep}

    # Each instrumented client has its own recorder thread: their manifests arrive in any order.
    in_steps = sorted(by_instrument.manifests, key=lambda m: m.step)
    for proxied, instrumented_one in zip(sorted(by_proxy.manifests, key=lambda m: m.step), in_steps, strict=True):
        assert comparable(proxied) == comparable(instrumented_one)


@pytest.mark.django_db(transaction=True)
def test_the_ctxkit_proxy_command_records_with_the_key_and_host_from_the_environment(live_server, key, provider):
    env = {**os.environ, "CTXVIEW_API_KEY": key, "CTXVIEW_HOST": live_server.url,
           "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-m", "ctxkit.proxy", "--port", "0", "--anthropic-upstream",
                                provider.url, "--openai-upstream", provider.url, "--agent", "cli-agent"],
                               env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stderr.readline()
        assert "ctxkit proxy listening on http://127.0.0.1:" in line and f"recording to {live_server.url}" in line
        url = line.split("listening on ")[1].split(" ")[0]
        client = _openai(url, default_headers={"X-Ctxview-Run": "cli-run"})
        assert client.chat.completions.create(model="gpt-4o", messages=CHAT).usage.prompt_tokens == 2000
    finally:
        process.send_signal(signal.SIGTERM)  # flushes what it recorded on the way out
        assert process.wait(20) == 0
    calls = _get(live_server, key, "/api/v1/runs/cli-run/calls")["results"]
    assert len(calls) == 1
    call = _get(live_server, key, f"/api/v1/calls/{calls[0]['call_id']}")
    assert (call["agent"], call["input_tokens"], call["step"]) == ("cli-agent", 2000, 0)
