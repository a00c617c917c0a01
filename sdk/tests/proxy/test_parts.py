"""The proxy's parts on their own: secret masking (a test per pattern), the SSE reader, run
placement, routing, and the command line's help."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

from ctxkit.providers.sse import json_events, parse_events
from ctxkit.proxy.capture import Capture, Exchange
from ctxkit.proxy.options import add_arguments, config_from_args
from ctxkit.proxy.runs import RunResolver
from ctxkit.proxy.secrets import PATTERNS, mask_json, mask_json_text, mask_text
from ctxkit.proxy.server import route
from ctxkit.proxy.worker import CaptureProcess

SECRETS = {
    "private-key": ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAEbm9uZQ==\n"
                    "-----END OPENSSH PRIVATE KEY-----"),
    "anthropic-key": "sk-ant-api03-Zx8Kq2Lm4Nn6Pp8Rr0Tt2Vv4Xx6Zz8Bb0Dd2",
    "openai-key": "sk-proj-Zx8Kq2Lm4Nn6Pp8Rr0Tt2Vv4Xx6",
    "stripe-key": "sk_live_Zx8Kq2Lm4Nn6Pp8Rr0Tt2Vv",
    "aws-access-key": "AKIAIOSFODNN7EXAMPLE",
    "github-token": "ghp_Zx8Kq2Lm4Nn6Pp8Rr0Tt2Vv4Xx6Zz8Bb0Dd2",
    "gitlab-token": "glpat-Zx8Kq2Lm4Nn6Pp8Rr0Tt",
    "slack-token": "xoxb-1234567890-abcdefghij",
    "google-api-key": "AIzaSyA-Zx8Kq2Lm4Nn6Pp8Rr0Tt2Vv4Xx6Zz8B",
    "ctxview-key": "ctx_Zx8Kq2Lm4Nn6Pp8Rr0Tt2Vv4Xx6",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
}


def test_every_pattern_has_a_test():
    assert {kind for kind, *_ in PATTERNS} == {*SECRETS, "bearer-token", "url-password", "secret"}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_kind_of_secret_is_masked_where_it_stands(kind):
    text = f"the tool printed: {SECRETS[kind]} and went on"
    assert mask_text(text) == f"the tool printed: [masked:{kind}] and went on"


def test_a_bearer_token_is_masked_and_the_word_kept():
    assert mask_text("curl -H 'Authorization: Bearer abc123def456ghi789jkl'") == \
        "curl -H 'Authorization: Bearer [masked:bearer-token]'"


def test_a_password_in_a_url_is_masked_and_the_user_and_host_kept():
    assert mask_text("DATABASE_URL is postgres://app:s3cr3t-pw@db.internal:5432/app") == \
        "DATABASE_URL is postgres://[masked:url-password]@db.internal:5432/app"


@pytest.mark.parametrize("line, masked", [
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY=[masked:secret]"),
    ('{"api_key": "9f8e7d6c5b4a39281706"}', '{"api_key": "[masked:secret]"}'),
    ("password: hunter2hunter2", "password: [masked:secret]"),
    ("export GITHUB_TOKEN='0123456789abcdef0123'", "export GITHUB_TOKEN='[masked:secret]'"),
])
def test_a_value_assigned_to_a_secret_name_is_masked(line, masked):
    assert mask_text(line) == masked


def _masked_both_ways(text: str) -> str:
    """``text`` masked as a string and inside a JSON document (the proxy's path): the same result."""
    raw = mask_text(text)
    masked, _ = mask_json_text(json.dumps({"content": text}))
    assert json.loads(masked) == {"content": raw} == mask_json({"content": text})
    return raw


def test_it_masks_a_passphrase_with_spaces_to_the_end_of_the_line():
    assert _masked_both_ways("password: correct horse battery staple\nnext line") == \
        "password: [masked:secret]\nnext line"


def test_it_masks_a_value_shorter_than_eight_characters():
    assert _masked_both_ways("password=hunter2") == "password=[masked:secret]"
    assert _masked_both_ways("token: 5") == "token: [masked:secret]"


def test_it_masks_a_value_past_punctuation_to_the_end_of_the_line():
    assert _masked_both_ways("DB_PASSWORD=ViSZ7uO7GJ,8aAHecM") == "DB_PASSWORD=[masked:secret]"
    assert _masked_both_ways("env:\r\nDB_PASSWORD=ab;c)d]e}f>g\\h\"i\r\nPORT=5432") == \
        "env:\r\nDB_PASSWORD=[masked:secret]\r\nPORT=5432"


@pytest.mark.parametrize("line, masked", [
    ('PASSWORD="a b, c" and on', 'PASSWORD="[masked:secret]" and on'),
    ("secret = 'x \"y\" z'; next", "secret = '[masked:secret]'; next"),
    ('config {"api_key": "k 1,2;3", "n": 1}', 'config {"api_key": "[masked:secret]", "n": 1}'),
])
def test_it_masks_a_quoted_value_up_to_its_closing_quote(line, masked):
    assert _masked_both_ways(line) == masked


def test_it_masks_the_string_value_of_a_secret_named_key_and_leaves_other_values_alone():
    request = {"password": "correct horse, battery", "api_key": 12, "token": None, "max_tokens": 1024,
               "schema": {"properties": {"password": {"type": "string"}}}}
    masked, count = mask_json_text(json.dumps(request))
    assert count == 1 and json.loads(masked) == {**request, "password": "[masked:secret]"} == mask_json(request)


@pytest.mark.parametrize("text", [
    "max_tokens=1024 and input_tokens: 1950", "the token count is 5", "sha256 a3f1c9e0b7d24f6a8c1e3b5d7f9a0c2e",
    "task-sk-abc", "https://docs.example.com/path@v2", "call_id=call_8f3a", "monkey=bananas123",
])
def test_ordinary_text_is_left_alone(text):
    assert mask_text(text) == text


def test_a_masked_json_document_is_still_json_of_the_same_shape():
    request = {"system": f"key {SECRETS['anthropic-key']}", "messages": [{"role": "user", "content": [
        {"type": "text", "text": f"env:\nPASSWORD=\"hunter2hunter2\"\n{SECRETS['private-key']}\nurl "
                                 f"https://u:pw12345@h/x \"{SECRETS['jwt']}\""}]}]}
    text, count = mask_json_text(json.dumps(request))
    masked = json.loads(text)
    assert count == 5 and masked == mask_json(request)
    assert masked["messages"][0]["content"][0]["text"] == (
        'env:\nPASSWORD=\"[masked:secret]\"\n[masked:private-key]\nurl https://[masked:url-password]@h/x '
        '"[masked:jwt]"')


def test_masking_reaches_every_string_of_a_request():
    request = {"system": f"key {SECRETS['anthropic-key']}", "messages": [
        {"role": "user", "content": [{"type": "tool_result", "content": f"AKIA {SECRETS['aws-access-key']}"}]}]}
    masked = json.dumps(mask_json(request))
    assert SECRETS["anthropic-key"] not in masked and SECRETS["aws-access-key"] not in masked
    assert masked.count("[masked:") == 2


def test_sse_events_are_read_as_the_spec_says():
    text = ("event: message_start\r\ndata: {\"a\": 1}\r\n\r\n: a comment\n\ndata: first\ndata: second\n\n"
            "data:no-space\n\nevent: cut\ndata: {\"b\": 2}")
    assert parse_events(text) == [("message_start", '{"a": 1}'), ("", "first\nsecond"), ("", "no-space"),
                                  ("cut", '{"b": 2}')]
    events, unreadable = json_events(text + "\n\ndata: [DONE]\n\n")
    assert events == [{"a": 1}, {"b": 2}] and unreadable == 2


def _anthropic_request(*messages: str) -> dict:
    roles = ["user", "assistant"]
    return {"model": "m", "messages": [{"role": roles[i % 2], "content": [{"type": "text", "text": m}]}
                                       for i, m in enumerate(messages)]}


def test_a_call_that_extends_a_recent_one_continues_its_run():
    runs = RunResolver()
    a1 = runs.place("anthropic.messages", _anthropic_request("hi"), {})
    b1 = runs.place("anthropic.messages", _anthropic_request("another task"), {})
    a2 = runs.place("anthropic.messages", _anthropic_request("hi", "hello", "go on"), {})
    # The breakpoint moved to the newest message: the earlier messages still match.
    moved = _anthropic_request("hi", "hello", "go on", "done", "thanks")
    moved["messages"][2]["content"][0]["cache_control"] = {"type": "ephemeral"}
    a3 = runs.place("anthropic.messages", moved, {})
    b2 = runs.place("anthropic.messages", _anthropic_request("another task", "ok", "next"), {})
    assert a1.run_id == a2.run_id == a3.run_id != b1.run_id == b2.run_id
    assert [p.step for p in (a1, a2, a3)] == [0, 1, 2] and [b1.step, b2.step] == [0, 1]
    assert (a1.how, a2.how) == ("new", "continued")
    # The same first message again is a new conversation, not a step of the old one...
    assert runs.place("anthropic.messages", _anthropic_request("hi"), {}).run_id != a1.run_id
    # ...unless the earlier call failed: then it is the SDK's retry, in the same run.
    failed = runs.place("anthropic.messages", _anthropic_request("retry me"), {}, failed=True)
    retried = runs.place("anthropic.messages", _anthropic_request("retry me"), {})
    assert (retried.run_id, retried.step) == (failed.run_id, 1)
    assert runs.place("anthropic.messages", _anthropic_request("retry me"), {}).run_id != failed.run_id


def test_a_string_content_continues_a_conversation_that_sent_it_as_one_text_block():
    runs = RunResolver()
    first = {"messages": [{"role": "user", "content": "hi"},
                          {"role": "system", "content": [{"type": "text", "text": "ctx", "cache_control": {}}]}]}
    later = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                          {"role": "system", "content": "ctx"}, {"role": "assistant", "content": "ok"},
                          {"role": "user", "content": "more"}]}
    assert runs.place("anthropic.messages", first, {}).run_id == runs.place("anthropic.messages", later, {}).run_id


def test_headers_then_session_then_continuity_decide_the_run():
    runs = RunResolver()
    session = json.dumps({"device_id": "d", "session_id": "s-1"})
    request = {**_anthropic_request("hi"), "metadata": {"user_id": session}}
    assert runs.place("anthropic.messages", request, {"x-ctxview-run": "mine"}).run_id == "mine"
    assert runs.place("anthropic.messages", request, {}).run_id == "session-s-1"
    assert runs.place("anthropic.messages", _anthropic_request("x"), {"x-claude-code-session-id": "s-2"}).run_id \
        == "session-s-2"
    first = runs.place("openai.responses", {"input": "hello"}, {}, response_id="resp_1")
    follow = runs.place("openai.responses", {"input": [{"role": "user", "content": "more"}],
                                             "previous_response_id": "resp_1"}, {})
    assert (follow.run_id, follow.step, follow.how) == (first.run_id, 1, "continued")


def test_the_agent_is_the_header_then_the_option_then_the_user_agent():
    runs = RunResolver()
    ua = {"user-agent": "claude-cli/2.1.332 (external, sdk-cli)"}
    assert runs.place("anthropic.messages", {}, {**ua, "x-ctxview-agent": "me"}).agent == "me"
    assert runs.place("anthropic.messages", {}, ua, default_agent="opt").agent == "opt"
    assert runs.place("anthropic.messages", {}, ua).agent == "claude-cli"
    assert runs.place("anthropic.messages", {}, {}).agent == "proxy"


@pytest.mark.parametrize("method, path, query, headers, expected", [
    ("POST", "/v1/messages", "", {}, ("anthropic", "anthropic.messages")),
    ("POST", "/v1/messages", "beta=true", {}, ("anthropic", "anthropic.messages")),
    ("POST", "/v1/messages/count_tokens", "", {}, ("anthropic", "")),
    ("POST", "/v1/messages/batches", "", {}, ("anthropic", "")),
    ("GET", "/v1/models", "", {"anthropic-version": "2023-06-01"}, ("anthropic", "")),
    ("GET", "/v1/models", "", {}, ("openai", "")),
    ("POST", "/v1/chat/completions", "", {}, ("openai", "openai.chat")),
    ("POST", "/v1/responses", "", {}, ("openai", "openai.responses")),
    ("GET", "/v1/responses/resp_1", "stream=true", {}, ("openai", "openai.responses.resumed")),
    ("GET", "/v1/responses/resp_1", "", {}, ("openai", "")),
    ("POST", "/v1/embeddings", "", {}, ("openai", "")),
    ("POST", "/v1/files", "", {}, ("openai", "")),
    ("POST", "/v1beta/models/gemini-2.5-pro:generateContent", "", {}, ("gemini", "gemini.generate")),
    ("POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent", "alt=sse", {}, ("gemini", "gemini.stream")),
    ("POST", "/v1/models/gemini-2.5-pro:streamGenerateContent", "key=AIza", {}, ("gemini", "gemini.stream")),
    ("POST", "/v1beta/models/gemini-2.5-pro:countTokens", "", {}, ("gemini", "")),
    ("GET", "/v1beta/models", "", {}, ("gemini", "")),
    ("GET", "/v1/models", "", {"x-goog-api-key": "AIza"}, ("gemini", "")),
    ("POST", "/upload/v1beta/files", "", {}, ("gemini", "")),
])
def test_requests_are_routed_and_only_model_calls_recorded(method, path, query, headers, expected):
    assert route(method, path, query, headers) == expected


class _Names(argparse.ArgumentParser):
    """Keeps the option names add_arguments() declares."""

    def __init__(self) -> None:
        self.names: list[str] = []
        super().__init__()

    def add_argument(self, *names, **kwargs):
        self.names.extend(n for n in names if n.startswith("--"))
        return super().add_argument(*names, **kwargs)


def test_the_help_documents_every_option():
    declared = _Names()
    add_arguments(declared)
    options = declared.names
    out = subprocess.run([sys.executable, "-m", "ctxkit.cli", "proxy", "--help"], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout
    for option in options:
        assert option in out
    assert {"--port", "--host", "--anthropic-upstream", "--openai-upstream", "--no-text", "--ctxview-host",
            "--ctxview-api-key"} <= set(options)
    module = subprocess.run([sys.executable, "-m", "ctxkit.proxy", "--help"], capture_output=True, text=True,
                            check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}).stdout
    assert module.split("options:")[1] == out.split("options:")[1]


@pytest.mark.parametrize("argv, spool_dir", [
    ([], True),  # the per-user default folder of the ctxview host and key
    (["--spool-dir", "/var/spool/agent"], "/var/spool/agent"),
    (["--no-spool"], None),
])
def test_the_proxy_spools_to_the_per_user_folder_unless_told_otherwise(argv, spool_dir):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args(argv)).spool_dir == spool_dir


def test_the_recorder_process_bounds_what_waits_for_it_in_bytes():
    recorder = CaptureProcess(api_key="ctx_nobody", host="http://127.0.0.1:9", max_bytes=1000)
    try:
        recorder.submit(Exchange(api="anthropic.messages", request_body=b"x" * 2000, headers={}, started=0.0))
        assert recorder.stats["dropped"] == 1
        recorder.submit(Exchange(api="anthropic.messages", request_body=b"{}", headers={}, started=0.0))
        assert recorder.stats["dropped"] == 1
    finally:
        assert recorder.close(20)


def _answered(api: str, path: str, answer: object, stream: bool = False) -> Exchange:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "input": "hi",
               "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    if stream:
        chunks = [f"data: {json.dumps(event)}\n\n".encode() for event in answer]  # type: ignore[attr-defined]
        return Exchange(api=api, request_body=json.dumps(request).encode(), headers={}, started=0.0, status=200,
                        content_type="text/event-stream", chunks=chunks, path=path)
    return Exchange(api=api, request_body=json.dumps(request).encode(), headers={}, started=0.0, status=200,
                    content_type="application/json", chunks=[json.dumps(answer).encode()], path=path)


@pytest.mark.parametrize(("exchange", "want"), [
    (_answered("anthropic.messages", "/v1/messages", {"id": "msg_01A", "type": "message", "content": []}),
     "msg_01A"),
    (_answered("anthropic.messages", "/v1/messages", [
        {"type": "message_start", "message": {"id": "msg_01B", "type": "message", "content": []}},
        {"type": "message_stop"}], stream=True), "msg_01B"),
    (_answered("openai.chat", "/v1/chat/completions", {"id": "chatcmpl-C", "object": "chat.completion"}),
     "chatcmpl-C"),
    (_answered("openai.chat", "/v1/chat/completions", [
        {"id": "chatcmpl-D", "object": "chat.completion.chunk", "choices": []}], stream=True), "chatcmpl-D"),
    (_answered("openai.responses", "/v1/responses", {"id": "resp_E", "object": "response", "output": []}),
     "resp_E"),
    (_answered("openai.responses", "/v1/responses", [
        {"type": "response.created", "response": {"id": "resp_F", "status": "in_progress"}}], stream=True), "resp_F"),
    (_answered("gemini.generate", "/v1beta/models/gemini-2.5-pro:generateContent",
               {"candidates": [], "responseId": "G1"}), "G1"),
    (_answered("gemini.stream", "/v1beta/models/gemini-2.5-pro:streamGenerateContent",
               [{"candidates": [], "responseId": "H2"}], stream=True), "H2"),
])
def test_it_stores_a_call_under_its_response_id(exchange, want):
    manifest = Capture(sink=None).build(exchange)
    assert manifest is not None and manifest.call_id == want


def test_it_gives_a_call_without_a_response_id_the_id_it_is_given_or_a_fresh_one():
    bare = _answered("anthropic.messages", "/v1/messages", {"type": "message", "content": []})
    assert Capture(sink=None).build(bare, call_id="imported-1").call_id == "imported-1"  # type: ignore[union-attr]
    first, second = (Capture(sink=None).build(bare) for _ in range(2))
    assert first and second and first.call_id != second.call_id and len(first.call_id) == 32
    resumed = _answered("openai.responses.resumed", "/v1/responses/resp_E", [
        {"type": "response.completed", "response": {"id": "resp_E", "status": "completed"}}], stream=True)
    assert Capture(sink=None).build(resumed).call_id != "resp_E"  # type: ignore[union-attr]
