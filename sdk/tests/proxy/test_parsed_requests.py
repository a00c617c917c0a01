"""A request handed to the proxy's mapping already parsed (``ctxkit import``) gives the manifest the
same body gives as bytes (the proxy): the same items, masks, prefix and run placement."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec

from ctxkit.proxy.capture import Capture, Exchange

SECRET = "sk-ant-api03-" + "Q" * 40
TOOLS = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {}}},
         {"name": "Bash", "description": "Run a command; token: abcdef0123456789", "input_schema": {"type": "object"}}]
SYSTEM = [{"type": "text", "text": "You are an agent. Authorization: Bearer abcdefghijklmnop0123"},
          {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]


def _session() -> list[dict[str, Any]]:
    """Six requests of one conversation sharing their message objects, as the reader builds them:
    secrets in a tool result, a tool call's input and the metadata, an emoji and a lone surrogate."""
    messages: list[Any] = [{"role": "user", "content": "read the config 🙂"}]
    requests = []
    for turn in range(6):
        request = {"model": "claude-sonnet-4-5", "max_tokens": 1000, "system": SYSTEM, "tools": TOOLS,
                   "metadata": {"user_id": "u-1", "api_key": "plain-secret-value"},
                   "messages": list(messages)}
        requests.append(request)
        call = {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{turn}", "name": "Read",
                                                  "input": {"file_path": ".env", "password": "hunter22!"}}]}
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{turn}",
                                               "content": f"ANTHROPIC_API_KEY={SECRET}\nline {turn} \ud800 end"}]}
        messages += [call, result]
    return requests


def _exchange(request: dict[str, Any], turn: int, parsed: bool) -> Exchange:
    answer = {"id": f"msg_{turn}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
              "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
              "usage": {"input_tokens": 100 + turn, "output_tokens": 5}}
    return Exchange(api="anthropic.messages", request_body=b"" if parsed else json.dumps(request).encode(),
                    request=request if parsed else None, headers={"x-ctxview-run": "run-1"}, started=1_800_000_000.0,
                    status=200, content_type="application/json", chunks=[json.dumps(answer).encode()])


def test_it_maps_a_parsed_request_as_the_same_body_sent_as_bytes() -> None:
    requests = _session()
    untouched = copy.deepcopy(requests)
    live, imported = Capture(None), Capture(None)
    for turn, request in enumerate(requests):
        from_bytes = live.build(_exchange(request, turn, parsed=False))
        from_parsed = imported.build(_exchange(request, turn, parsed=True))
        assert from_bytes is not None and from_parsed is not None
        assert msgspec.json.encode(from_parsed) == msgspec.json.encode(from_bytes)
        recorded = msgspec.json.encode(from_parsed).decode()
        for secret in (SECRET, "hunter22", "plain-secret-value", "abcdefghijklmnop0123", "abcdef0123456789"):
            assert secret not in recorded
        if turn:
            assert "[masked:anthropic-key]" in recorded and "\ufffd" in recorded
    assert from_parsed.step == len(requests) - 1  # one run, placed as live
    assert requests == untouched  # the reader's objects are left as they were


def test_it_maps_an_object_shared_by_two_requests_once() -> None:
    requests = _session()
    capture = Capture(None)
    for turn, request in enumerate(requests):
        capture.build(_exchange(request, turn, parsed=True))
    shared = requests[-1]["messages"]
    # every message of the last request was read before but the two its turn added, and each
    # entry of the tools and system once
    assert len(capture.parsed.entries) == len(shared) + len(TOOLS) + len(SYSTEM)
