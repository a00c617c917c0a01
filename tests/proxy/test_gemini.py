"""ctxkit proxy with the Gemini API: the real ``google-genai`` client (its base URL pointed at the
proxy) and raw requests as Gemini CLI sends them, against the Gemini stand-in
(tests/proxy/provider_standin.py). The client gets what it gets straight from the stand-in;
``generateContent`` and ``streamGenerateContent`` (server-sent events and the JSON-array stream,
``v1`` and ``v1beta``) reach ctxview as calls with the system instruction, each function
declaration and the contents as items and the usage as the stand-in reported it;
``countTokens`` is forwarded unrecorded; the key, in ``x-goog-api-key`` or in the URL, reaches the
provider and nowhere else: not the database, not the proxy's output."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from django.core.management import call_command
from google import genai
from google.genai import types

from tests.proxy.provider_standin import GEMINI_USAGE, TEXT, StandIn
from tests.proxy.proxy_support import raw_request, running_proxy

KEY = "AIzaSyGEMINIKEYGEMINIKEYGEMINIKEY01234"
URL_KEY = "AIzaSyURLKEYURLKEYURLKEYURLKEY9876543"
MODEL = "gemini-2.5-pro"
SYSTEM = "You are the refund analyst.\nAnswer in English."
DECLARATIONS = [
    {"name": "read_file", "description": "Read a file", "parameters": {
        "type": "OBJECT", "properties": {"path": {"type": "STRING"}}, "required": ["path"]}},
    {"name": "list_directory", "description": "List a folder", "parameters": {
        "type": "OBJECT", "properties": {"dir_path": {"type": "STRING"}}}},
]
CONTEXT = ("<session_context>\nThis is the Gemini CLI. We are setting up the context for our chat.\n"
           "My operating system is: linux\n</session_context>")
GEMINI_CLI = {"User-Agent": "GeminiCLI/0.61.0/gemini-2.5-pro (linux; x64)", "Content-Type": "application/json",
              "x-goog-api-client": "google-genai-sdk/1.30.0 gl-node/v20.20.2",
              "x-gemini-api-privileged-user-id": "0510e22d-31c9-4342-a03e-b90c3244c017"}


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _calls(live_server, key: str, count: int, timeout: float = 20) -> list[dict]:
    """Every call of the project (once ``count`` have arrived), by run and step."""
    deadline = time.monotonic() + timeout
    while True:
        runs = _get(live_server, key, "/api/v1/runs?page_size=100")["results"]
        if sum(r["call_count"] for r in runs) >= count or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    calls = [_get(live_server, key, f"/api/v1/calls/{c['call_id']}") for r in runs
             for c in _get(live_server, key, f"/api/v1/runs/{r['run_id']}/calls")["results"]]
    return sorted(calls, key=lambda c: (c["run_id"], c["step"]))


def _turn(*texts: str, prompt: str) -> dict:
    """A Gemini CLI turn's body: the session context and the prompt in one user content."""
    return {"contents": [{"role": "user", "parts": [{"text": CONTEXT}, *({"text": t} for t in texts),
                                                     {"text": prompt}]}],
            "systemInstruction": {"role": "user", "parts": [{"text": SYSTEM}]},
            "tools": [{"functionDeclarations": DECLARATIONS}],
            "generationConfig": {"temperature": 1, "thinkingConfig": {"includeThoughts": True}}}


@pytest.mark.django_db(transaction=True)
def test_it_records_gemini_calls_and_never_the_key(live_server, key):
    env = {**os.environ, "CTXVIEW_API_KEY": key, "CTXVIEW_HOST": live_server.url,
           "PYTHONPATH": os.pathsep.join(sys.path)}
    with StandIn() as provider:
        process = subprocess.Popen([sys.executable, "-m", "ctxkit.proxy", "--port", "0", "-v",
                                    "--anthropic-upstream", provider.url, "--openai-upstream", provider.url,
                                    "--gemini-upstream", provider.url],
                                   env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            lines = [process.stderr.readline()]
            while "listening on " not in lines[-1] and lines[-1]:
                lines.append(process.stderr.readline())
            url = lines[-1].split("listening on ")[1].split(" ")[0]
            client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=url, api_version="v1beta"))
            config = types.GenerateContentConfig(system_instruction=SYSTEM, tools=[types.Tool(
                function_declarations=[types.FunctionDeclaration(**d) for d in DECLARATIONS])])
            answer = client.models.generate_content(model=MODEL, contents="Why did refunds rise?", config=config)
            assert answer.text == TEXT and answer.usage_metadata.cached_content_token_count == 1500
            streamed = list(client.models.generate_content_stream(
                model=MODEL, contents="Why did refunds rise?", config=config))
            assert "".join(c.text or "" for c in streamed) == TEXT
            assert client.models.count_tokens(model=MODEL, contents="Why?").total_tokens == 1950
            # The key in the URL, the JSON-array stream (no alt=sse), the v1 API.
            body = json.dumps(_turn(prompt="Say hello")).encode()
            status, headers, array = raw_request(url, "POST", f"/v1/models/{MODEL}:streamGenerateContent?key={URL_KEY}",
                                                 body, {"Content-Type": "application/json"})
            assert status == 200 and headers["content-type"].startswith("application/json")
            assert [c["usageMetadata"] for c in json.loads(array)][-1] == GEMINI_USAGE
            # countTokens with the key in the URL: forwarded, not recorded.
            status, _, _ = raw_request(url, "POST", f"/v1beta/models/{MODEL}:countTokens?key={URL_KEY}", body,
                                       {"Content-Type": "application/json"})
            assert status == 200
        finally:
            process.send_signal(signal.SIGTERM)  # flushes what it recorded on the way out
            out, err = process.communicate(timeout=20)
            err = "".join(lines) + err
        assert process.returncode == 0
        received = list(zip(provider.requests, provider.queries, provider.headers, strict=True))

    # Every request reached the stand-in as sent: the key in its header or in the URL.
    assert [path for (path, _), _, _ in received] == [
        f"/v1beta/models/{MODEL}:generateContent", f"/v1beta/models/{MODEL}:streamGenerateContent",
        f"/v1beta/models/{MODEL}:countTokens", f"/v1/models/{MODEL}:streamGenerateContent",
        f"/v1beta/models/{MODEL}:countTokens"]
    assert [h.get("x-goog-api-key") for _, _, h in received][:3] == [KEY] * 3
    assert received[1][1] == "alt=sse" and received[3][1] == f"key={URL_KEY}"

    calls = _calls(live_server, key, 3)
    assert len(calls) == 3  # countTokens is not a model call
    for call in calls:
        assert (call["model"], call["provider"]) == (MODEL, "google")
        usage = (call["input_tokens"], call["cache_read_tokens"], call["output_tokens"], call["reasoning_tokens"])
        assert usage == (2000 + 30, 1500, 12 + 4, 4)
        assert [i["text"] for i in call["items"] if i["kind"] == "system"] == [SYSTEM]
        tools = [json.loads(i["text"]) for i in call["items"] if i["kind"] == "tools"]
        assert [t["name"] for t in tools] == ["read_file", "list_directory"]
        assert [s["name"] for s in call["prefix_segments"]][:2] == ["system", "tools"]
    by_prompt = {next(i["text"] for i in c["items"] if i["kind"] in ("task", "user")): c for c in calls}
    assert set(by_prompt) == {"Why did refunds rise?", CONTEXT}

    dump = io.StringIO()
    call_command("dumpdata", stdout=dump)
    assert "Why did refunds rise?" in dump.getvalue()  # the dump holds what was recorded...
    for secret in (KEY, URL_KEY):  # ...and neither key; nor does the proxy's output
        assert secret not in dump.getvalue() and secret not in out and secret not in err


@pytest.mark.django_db(transaction=True)
def test_a_gemini_cli_session_is_one_run_with_its_side_requests(live_server, key, sender, client, owner, project):
    side = {"contents": [{"role": "user", "parts": [{"text": CONTEXT}]},
                         {"role": "user", "parts": [{"text": "Say hello"}]}],
            "systemInstruction": {"role": "user", "parts": [{"text": "You are a specialized Task Routing AI."}]},
            "generationConfig": {"responseMimeType": "application/json"}}
    first = _turn(prompt="Say hello and use a tool")
    with StandIn() as provider, running_proxy(provider.url, sender) as proxy:
        def post(path: str, body: dict) -> bytes:
            status, _, data = raw_request(proxy.url, "POST", path, json.dumps(body).encode(),
                                          {**GEMINI_CLI, "x-goog-api-key": KEY})
            assert status == 200
            return data

        post("/v1beta/models/gemini-2.5-flash-lite:generateContent", side)  # the routing side request
        events = post(f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", first)
        call = json.loads(events.decode().split("data: ")[1])["candidates"][0]["content"]["parts"][0]
        assert call["functionCall"]["name"] == "read_file"
        second = {**first, "contents": [*first["contents"], {"role": "model", "parts": [call]},
                                        {"role": "user", "parts": [{"functionResponse": {
                                            "name": "read_file", "response": {"output": "refund_rate=0.0321"}}}]}]}
        post(f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", second)
        proxy.capture.flush(10)

    calls = _calls(live_server, key, 3)
    assert len({c["run_id"] for c in calls}) == 1 and [c["step"] for c in calls] == [0, 1, 2]
    assert {c["agent"] for c in calls} == {"GeminiCLI"}
    assert [c["model"] for c in calls] == ["gemini-2.5-flash-lite", MODEL, MODEL]
    answered = calls[2]
    tool_call = next(i for i in answered["items"] if i["kind"] == "history")
    result = next(i for i in answered["items"] if i["kind"] == "tool_result")
    assert json.loads(tool_call["text"]) == {"name": "read_file", "args": {"path": "README.md"}}
    assert tool_call["group"] == result["group"] and "refund_rate=0.0321" in result["text"]
    # The call page shows its window by category, the tools counted, the cached tokens as cache reads.
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/calls/{answered['call_id']}/").content.decode()
    assert f"Tool definitions: built-in {len(DECLARATIONS)}, MCP 0." in page
    assert all(f'data-category="{c}"' in page for c in ("system", "tools", "messages", "tool_results"))
    assert f"({GEMINI_USAGE['cachedContentTokenCount']} cached, 0 written)" in page
