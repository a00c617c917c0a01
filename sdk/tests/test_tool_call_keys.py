"""A tool call's key (its item's content hash, which finds re-reads) is the same for the same tool
and arguments, whatever the key order or spacing the model wrote its arguments in, for every provider."""

from __future__ import annotations

import json

import pytest

from ctxkit.instrumentation.bodies import manifest_from_bodies

ARGS = {"path": "/repo/app.py", "limit": 200, "options": {"b": 1, "a": [1, 2]}}
REORDERED = {"options": {"a": [1, 2], "b": 1}, "limit": 200, "path": "/repo/app.py"}


def chat(args: str, *, name: str = "read_file") -> tuple[str, dict, dict]:
    return "openai.chat", {"model": "gpt-4o", "messages": [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"}]}, {
        "model": "gpt-4o", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


def responses(args: str, *, name: str = "read_file") -> tuple[str, dict, dict]:
    return "openai.responses", {"model": "gpt-5-codex", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read it"}]},
        {"type": "function_call", "call_id": "call_1", "name": name, "arguments": args},
        {"type": "function_call_output", "call_id": "call_1", "output": "print(1)"}]}, {
        "model": "gpt-5-codex", "status": "completed", "output": [], "usage": {"input_tokens": 1, "output_tokens": 1}}


def gemini(args: dict, *, name: str = "read_file") -> tuple[str, dict, dict]:
    return "gemini.generate", {"model": "gemini-2.5-pro", "contents": [
        {"role": "user", "parts": [{"text": "read it"}]},
        {"role": "model", "parts": [{"functionCall": {"name": name, "args": args}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": name, "response": {"output": "print(1)"}}}]}]}, {
        "modelVersion": "gemini-2.5-pro", "candidates": [], "usageMetadata": {"promptTokenCount": 1}}


def call_key(api: str, request: dict, response: dict) -> str:
    m = manifest_from_bodies(api, request, response=response, call_id="c", run_id="r", step=0, started=0)
    calls = [i for i in m.items if i.label and " call · turn " in i.label]
    assert len(calls) == 1, [(i.id, i.kind, i.label) for i in m.items]
    return str(calls[0].content_hash)


@pytest.mark.parametrize("mapping", [chat, responses])
def test_it_keys_json_text_arguments_by_their_content_not_their_order_or_spacing(mapping):
    key = call_key(*mapping(json.dumps(ARGS)))
    assert call_key(*mapping(json.dumps(REORDERED, indent=2))) == key
    assert call_key(*mapping(json.dumps({**ARGS, "limit": 201}))) != key
    assert call_key(*mapping(json.dumps(ARGS), name="write_file")) != key


def test_it_keeps_arguments_that_are_not_json_as_they_were_sent():
    assert call_key(*chat("{broken")) == call_key(*chat("{broken")) != call_key(*chat("{broken "))


def test_it_keys_gemini_arguments_by_their_content_not_their_order():
    assert call_key(*gemini(ARGS)) == call_key(*gemini(REORDERED)) != call_key(*gemini({**ARGS, "limit": 201}))
