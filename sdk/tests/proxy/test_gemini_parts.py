"""The Gemini API's pure parts (ctxkit.providers.gemini, ctxkit.agents.gemini_cli): its streams
read back, a call mapped from its bytes, Gemini CLI's session named, a key in a URL kept out of
what the proxy says."""

from __future__ import annotations

import json

from capture_support import build_all

from ctxkit.agents import memory_files, session_of
from ctxkit.breakdown import window_breakdown
from ctxkit.providers import gemini
from ctxkit.proxy.capture import Exchange
from ctxkit.proxy.server import without_keys

CHUNKS = [{"candidates": [{"content": {"role": "model", "parts": [{"text": "The rate "}]}}]},
          {"candidates": [{"content": {"role": "model", "parts": [{"text": "is 0.0321."}]}, "finishReason": "STOP"}],
           "usageMetadata": {"promptTokenCount": 900, "cachedContentTokenCount": 600, "candidatesTokenCount": 5,
                             "thoughtsTokenCount": 3, "toolUsePromptTokenCount": 20}, "modelVersion": "gemini-x"}]
REQUEST = {
    "systemInstruction": {"parts": [{"text": "You are Gemini CLI."}, {"text": "Be brief."}]},
    "tools": [{"functionDeclarations": [{"name": "read_file", "parameters": {"type": "OBJECT"}},
                                        {"name": "mcp__github__create_issue"}]}, {"googleSearch": {}}],
    "cachedContent": "cachedContents/abc123",
    "contents": [{"role": "user", "parts": [{"text": "Read the notes"}]},
                 {"role": "model", "parts": [{"text": "thinking...", "thought": True},
                                             {"functionCall": {"name": "read_file", "args": {"path": "a"}}}]},
                 {"role": "user", "parts": [{"functionResponse": {"name": "read_file",
                                                                  "response": {"output": "rate=0.0321"}}},
                                            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]},
                 {"role": "user", "parts": [{"text": "And now?"}]}],
}


def test_both_streams_of_gemini_read_the_same_chunks():
    sse = "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in CHUNKS)
    array = "[" + ",\r\n".join(json.dumps(c) for c in CHUNKS) + "]"
    assert gemini.read_events(sse) == gemini.read_events(array) == (CHUNKS, 0)
    cut = array[:-40]  # a stream cut short keeps the chunks that arrived whole
    assert gemini.read_events(cut) == (CHUNKS[:1], 1)
    assert gemini.answer_text(None, CHUNKS) == "The rate is 0.0321."


def _exchange(path: str, request: dict, chunks: list[dict], sse: bool) -> Exchange:
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) if sse else json.dumps(chunks)
    return Exchange(api="gemini.stream", request_body=json.dumps(request).encode(), headers={}, started=0.0,
                    status=200, content_type="text/event-stream" if sse else "application/json",
                    chunks=[body.encode()], path=path)


def test_a_gemini_call_becomes_items_usage_and_a_window_by_category():
    [sse, array] = build_all(_exchange("/v1beta/models/gemini-2.5-pro:streamGenerateContent", REQUEST, CHUNKS, True),
                             _exchange("/v1/models/gemini-2.5-pro:streamGenerateContent", REQUEST, CHUNKS, False))
    for manifest in (sse, array):
        assert (manifest.model, manifest.provider) == ("gemini-2.5-pro", "google")
        usage = manifest.usage
        assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens, usage.reasoning_tokens) == (
            920, 600, 8, 3)
        kinds = {item.id: item.kind for item in manifest.items}
        assert kinds == {
            "systemInstruction.parts[0]": "system", "systemInstruction.parts[1]": "system",
            "tools[0].functionDeclarations[0]": "tools", "tools[0].functionDeclarations[1]": "tools",
            "tools[1]": "tools", "cachedContent": "other", "contents[0].parts[0]": "task",
            "contents[1].parts[0]": "history", "contents[1].parts[1]": "history",
            "contents[2].parts[0]": "tool_result", "contents[2].parts[1]": "history", "contents[3].parts[0]": "user"}
        items = {item.id: item for item in manifest.items}
        assert items["cachedContent"].source_ref == "cachedContents/abc123"
        assert items["contents[1].parts[1]"].group == items["contents[2].parts[0]"].group
        assert json.loads(items["contents[2].parts[1]"].text or "") == {"inlineData": {"mimeType": "image/png",
                                                                                        "bytes": 8}}
        window = window_breakdown(manifest.items, manifest.budget.window, usage.input_tokens)
        assert (window.items["tools"], window.items["mcp_tools"], window.items["system"]) == (2, 1, 2)
        assert window.tokens["tool_results"] > 0 and window.tokens["messages"] > 0


def test_a_gemini_cli_session_is_named_by_its_installation_and_session_context():
    cli = {"user-agent": "GeminiCLI/0.61.0/gemini-2.5-pro (linux; x64)", "x-gemini-api-privileged-user-id": "u1"}
    context = "<session_context>\nToday is Sunday.\n</session_context>"
    one = session_of({}, cli, context)
    assert one.startswith("gemini-") and one == session_of({}, cli, context + "\nSay hello")
    assert session_of({}, {**cli, "x-gemini-api-privileged-user-id": "u2"}, context) != one
    assert session_of({}, cli, context.replace("Sunday", "Monday")) != one
    assert session_of({}, {"user-agent": "curl/8"}, context) == "" and session_of({}, cli, "Say hello") == ""


def test_gemini_cli_s_memory_files_are_named_from_its_session_context():
    context = ("<session_context>\nMy operating system is: linux\n<loaded_context>\n<project_context>\n"
               "--- Context from: /work/app/GEMINI.md ---\n# Notes\nAnswer in French.\n"
               "--- End of Context from: /work/app/GEMINI.md ---\n</project_context>\n</loaded_context>\n"
               "</session_context>")
    request = {"contents": [{"role": "user", "parts": [{"text": context}, {"text": "Say hello"}]}]}
    [manifest] = build_all(_exchange("/v1beta/models/gemini-2.5-pro:streamGenerateContent", request, CHUNKS, True))
    assert [(i.kind, i.source_ref) for i in manifest.items] == [
        ("memory", "/work/app/GEMINI.md"), ("task", "contents[0].parts[1]")]
    assert memory_files(context.replace("--- Context from", "--- Notes from")) is None


def test_a_key_in_a_url_is_masked_in_what_the_proxy_says():
    said = without_keys("Cannot connect to https://x.test/v1beta/models/m:generateContent?alt=sse&key=AIzaSECRET ok")
    assert "AIzaSECRET" not in said and "alt=sse&key=[masked] ok" in said


def test_a_per_call_value_in_a_gemini_system_instruction_is_found_in_its_prefix():
    from ctxkit.testing import scan_prefix

    request = {"systemInstruction": {"parts": [{"text": "You are Gemini CLI.\nToday is 2026-12-06T12:45:00Z."}]},
               "contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]}
    findings = scan_prefix(request)
    assert findings and {f.segment for f in findings} == {"system"}
