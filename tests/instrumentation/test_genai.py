"""ctxkit.instrument with the real ``google-genai`` client (its base URL pointed at the Gemini
stand-in, tests/proxy/provider_standin.py): ``generate_content`` and ``generate_content_stream``,
sync and async, reach a live ctxview server as calls with the system instruction, each function
declaration and the contents as items and the usage as the stand-in reported it; ``count_tokens``
is not a model call; an error is recorded as one."""

from __future__ import annotations

import json

import pytest
from google import genai
from google.genai import errors, types

import ctxkit
from tests.instrumentation.test_clients import run_in_own_loop, served_calls
from tests.proxy.provider_standin import GEMINI_USAGE, TEXT

SYSTEM = "You are the refund analyst.\nAnswer in English."
DECLARATION = types.FunctionDeclaration(name="bi_query", description="Query the BI warehouse", parameters={
    "type": "OBJECT", "properties": {"sql": {"type": "STRING"}}})
CONFIG = types.GenerateContentConfig(system_instruction=SYSTEM, tools=[types.Tool(function_declarations=[DECLARATION])],
                                     max_output_tokens=256)
HISTORY = [
    types.Content(role="user", parts=[types.Part(text="Why did refunds rise in week 47?")]),
    types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(
        name="bi_query", args={"sql": "select rate from refunds"}))]),
    types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        name="bi_query", response={"output": "refund_rate=0.0321"})),
        types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG" + b"\0" * 96))]),
]
USAGE = (GEMINI_USAGE["promptTokenCount"] + GEMINI_USAGE["toolUsePromptTokenCount"],
         GEMINI_USAGE["cachedContentTokenCount"],
         GEMINI_USAGE["candidatesTokenCount"] + GEMINI_USAGE["thoughtsTokenCount"], GEMINI_USAGE["thoughtsTokenCount"])


def gemini_client(url: str) -> genai.Client:
    return genai.Client(api_key="AIza-test", http_options=types.HttpOptions(base_url=url, api_version="v1beta"))


def _usage(call: dict) -> tuple[int, int, int, int]:
    return call["input_tokens"], call["cache_read_tokens"], call["output_tokens"], call["reasoning_tokens"]


@pytest.mark.django_db(transaction=True)
def test_it_records_google_genai_calls_streams_included(live_server, key, standin, sender):
    client = ctxkit.instrument(gemini_client(standin.url), ctxkit_client=sender)
    with ctxkit.instrument.run(run_id="gemini-run", agent="gemini-agent"):
        answer = client.models.generate_content(model="gemini-2.5-pro", contents=HISTORY, config=CONFIG)
        assert answer.text == TEXT and answer.usage_metadata.prompt_token_count == 2000
        streamed = list(client.models.generate_content_stream(model="gemini-2.5-pro", contents=HISTORY,
                                                              config=CONFIG))
        assert "".join(c.text or "" for c in streamed) == TEXT
        assert client.models.count_tokens(model="gemini-2.5-pro", contents="Why?").total_tokens == 1950
        with pytest.raises(errors.ClientError):
            client.models.generate_content(model="rate-limited", contents="Why?")
    assert ctxkit.instrument.flush(20)
    calls = sorted(served_calls(live_server, key, "gemini-run"), key=lambda c: c["step"])
    assert [(c["provider"], c["model"], c["status"]) for c in calls] == [
        ("google", "gemini-2.5-pro", "ok"), ("google", "gemini-2.5-pro", "ok"), ("google", "rate-limited", "error")]
    assert [_usage(c) for c in calls[:2]] == [USAGE, USAGE]
    assert [c["call_id"] for c in calls[:2]] == [answer.response_id, streamed[0].response_id]  # the answers' ids
    for call in calls[:2]:
        assert call["agent"] == "gemini-agent" and call["output_reserve"] == 256
        kinds = [(i["kind"], i["id"]) for i in call["items"]]
        assert kinds == [("system", "systemInstruction.parts[0]"), ("tools", "tools[0].functionDeclarations[0]"),
                         ("task", "contents[0].parts[0]"), ("history", "contents[1].parts[0]"),
                         ("tool_result", "contents[2].parts[0]"), ("user", "contents[2].parts[1]")]
        items = {i["id"]: i for i in call["items"]}
        assert json.loads(items["tools[0].functionDeclarations[0]"]["text"])["name"] == "bi_query"
        assert items["contents[1].parts[0]"]["group"] == items["contents[2].parts[0]"]["group"]
        # Inline data is sized, never stored.
        assert json.loads(items["contents[2].parts[1]"]["text"]) == {"inlineData": {"mimeType": "image/png",
                                                                                     "bytes": 100}}


@pytest.mark.django_db(transaction=True)
def test_it_records_the_async_google_genai_client(live_server, key, standin, sender):
    client = ctxkit.instrument(gemini_client(standin.url), ctxkit_client=sender)

    async def agent() -> None:
        with ctxkit.instrument.run(run_id="gemini-async"):
            answer = await client.aio.models.generate_content(model="gemini-2.5-flash", contents="Why?",
                                                              config=CONFIG)
            assert answer.text == TEXT
            chunks = [c async for c in await client.aio.models.generate_content_stream(
                model="gemini-2.5-flash", contents="Why?", config=CONFIG)]
            assert "".join(c.text or "" for c in chunks) == TEXT

    run_in_own_loop(agent)
    assert ctxkit.instrument.flush(20)
    calls = served_calls(live_server, key, "gemini-async")
    assert [(c["model"], _usage(c)) for c in calls] == [("gemini-2.5-flash", USAGE)] * 2
