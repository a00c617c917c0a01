"""A small local HTTP server that answers like the Anthropic, OpenAI and Gemini APIs, for the real
``anthropic`` / ``openai`` / ``google-genai`` clients (base_url pointed here), agent CLIs, tests
and bench/instrument.py.

Answers JSON or server-sent events (``"stream": true``) with usage that carries cache fields;
model ``rate-limited`` gets a 429 and model ``broken`` a 500, in each provider's error shape.
``GET /v1/responses/<id>`` answers the last Responses request again under that id (``?stream=true``:
its events). Every answer has an id of its own (``msg_…``, ``chatcmpl-…``, ``resp_…``, ``responseId``),
as the providers give them: the proxy stores a call under its response's id.
Gemini: ``POST /{v1,v1beta}/models/<model>:generateContent`` (JSON), ``:streamGenerateContent``
(server-sent events with ``?alt=sse``, a JSON array without), ``:countTokens``; a request whose
last user text asks to "use a tool" is answered with a ``functionCall`` of its first declared
function. Every request's query string is kept (``queries``), so a test can see a key forwarded.
Sets TCP_NODELAY, so Nagle's delay does not hide per-call costs.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANTHROPIC_USAGE = {"input_tokens": 50, "cache_read_input_tokens": 1800, "cache_creation_input_tokens": 100,
                   "output_tokens": 12}
CHAT_USAGE = {"prompt_tokens": 2000, "completion_tokens": 12, "total_tokens": 2012,
              "prompt_tokens_details": {"cached_tokens": 1024}, "completion_tokens_details": {"reasoning_tokens": 0}}
RESPONSES_USAGE = {"input_tokens": 1500, "input_tokens_details": {"cached_tokens": 1024}, "output_tokens": 12,
                   "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 1512}
GEMINI_USAGE = {"promptTokenCount": 2000, "cachedContentTokenCount": 1500, "candidatesTokenCount": 12,
                "thoughtsTokenCount": 4, "toolUsePromptTokenCount": 30, "totalTokenCount": 2046}
TEXT = "The refund rate is 0.0321."
JSON_TEXT = '{"rate": "0.0321"}'  # the answer when the request asks for a JSON schema (the SDKs' parse())


# The ids of the stand-in's answers (a uuid4 after a prefix per API).
ANSWER_ID = re.compile(r"(?:msg_standin_|chatcmpl-standin-|resp_standin_|gem_standin_)[0-9a-f]{32}")


def new_id(prefix: str) -> str:
    """A response id no other answer has."""
    return f"{prefix}{uuid.uuid4().hex}"


def same_ids(value: Any) -> Any:
    """``value`` (bytes, text, or parsed JSON) with each answer id replaced by one placeholder, so
    two answers to the same request compare equal whatever ids they were given."""
    if isinstance(value, bytes):
        return ANSWER_ID.sub("<id>", value.decode()).encode()
    if isinstance(value, str):
        return ANSWER_ID.sub("<id>", value)
    if isinstance(value, dict):
        return {k: same_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [same_ids(v) for v in value]
    return value


def text_for(body: dict[str, Any]) -> str:
    asks_json = (body.get("response_format") or (body.get("text") or {}).get("format")
                 or (body.get("output_config") or {}).get("format"))
    return JSON_TEXT if asks_json else TEXT


def anthropic_message(body: dict[str, Any]) -> dict[str, Any]:
    message = {"id": new_id("msg_standin_"), "type": "message", "role": "assistant", "model": body.get("model"),
               "content": [{"type": "text", "text": text_for(body)}], "stop_reason": "end_turn", "stop_sequence": None,
               "usage": dict(ANTHROPIC_USAGE)}
    if body.get("context_management"):
        message["context_management"] = {"applied_edits": [
            {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 3, "cleared_input_tokens": 4200}]}
        message["usage"]["iterations"] = [{"type": "compaction", "input_tokens": 90000, "output_tokens": 2100},
                                          {"type": "message", "input_tokens": 1950, "output_tokens": 12}]
    return message


def anthropic_events(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    start = anthropic_message(body)
    start.update(content=[], stop_reason=None, usage={**ANTHROPIC_USAGE, "output_tokens": 1})
    return [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": text_for(body)}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": dict(ANTHROPIC_USAGE)}),  # cumulative, as Anthropic sends it
        ("message_stop", {"type": "message_stop"}),
    ]


def chat_completion(body: dict[str, Any]) -> dict[str, Any]:
    return {"id": new_id("chatcmpl-standin-"), "object": "chat.completion", "created": 1764410400,
            "model": body.get("model"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text_for(body)},
                         "finish_reason": "stop", "logprobs": None}], "usage": CHAT_USAGE}


def chat_chunks(body: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"id": new_id("chatcmpl-standin-"), "object": "chat.completion.chunk", "created": 1764410400,
            "model": body.get("model")}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text_for(body)},
                                    "finish_reason": None}]},
              {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": CHAT_USAGE})
    return chunks


def _output_message(body: dict[str, Any], status: str = "completed", text: str | None = None) -> dict[str, Any]:
    return {"type": "message", "id": "msg_1", "status": status, "role": "assistant",
            "content": [] if text is None else [{"type": "output_text", "text": text, "annotations": []}]}


def response(body: dict[str, Any], status: str = "completed", response_id: str = "") -> dict[str, Any]:
    return {"id": response_id or new_id("resp_standin_"), "object": "response", "created_at": 1764410400,
            "model": body.get("model"),
            "status": status, "output": [] if status != "completed" else [_output_message(body, text=text_for(body))],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools") or [],
            "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
            "usage": RESPONSES_USAGE if status == "completed" else None}


def response_events(body: dict[str, Any], response_id: str = "") -> list[tuple[str, dict[str, Any]]]:
    """The Responses event sequence (output item and content part opened before the text delta,
    as the SDK's ``responses.stream()`` accumulator requires), of one response id."""
    text = text_for(body)
    response_id = response_id or new_id("resp_standin_")
    part = {"type": "output_text", "text": "", "annotations": []}
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    events = [
        {"type": "response.created", "response": response(body, "in_progress", response_id)},
        {"type": "response.output_item.added", "output_index": 0, "item": _output_message(body, "in_progress")},
        {"type": "response.content_part.added", **at, "part": part},
        {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": {**part, "text": text}},
        {"type": "response.output_item.done", "output_index": 0, "item": _output_message(body, text=text)},
        {"type": "response.completed", "response": response(body, response_id=response_id)},
    ]
    return [(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]


def _gemini_tool_call(body: dict[str, Any]) -> dict[str, Any] | None:
    """A functionCall of the first declared function when the last user text asks to use a tool."""
    contents = body.get("contents") or []
    last = contents[-1] if contents else {}
    asks = last.get("role", "user") == "user" and any("use a tool" in str(p.get("text", ""))
                                                      for p in last.get("parts") or [])
    declared = [f for t in body.get("tools") or [] for f in t.get("functionDeclarations") or []]
    if not asks or not declared:
        return None
    return {"functionCall": {"name": declared[0]["name"], "args": {"path": "README.md"}}}


def gemini_chunks(body: dict[str, Any], model: str) -> list[dict[str, Any]]:
    """The streamed chunks of one answer; usage and finish reason on the last (usage is cumulative)."""
    call = _gemini_tool_call(body)
    pieces = [[call]] if call else [[{"text": "The refund rate "}], [{"text": "is 0.0321."}]]
    response_id = new_id("gem_standin_")
    chunks = [{"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
               "usageMetadata": {"promptTokenCount": GEMINI_USAGE["promptTokenCount"]}, "modelVersion": model,
               "responseId": response_id} for parts in pieces]
    chunks[-1]["candidates"][0]["finishReason"] = "STOP"
    chunks[-1]["usageMetadata"] = dict(GEMINI_USAGE)
    return chunks


def gemini_response(body: dict[str, Any], model: str) -> dict[str, Any]:
    call = _gemini_tool_call(body)
    return {"candidates": [{"content": {"role": "model", "parts": [call or {"text": TEXT}]}, "finishReason": "STOP",
                            "index": 0}],
            "usageMetadata": dict(GEMINI_USAGE), "modelVersion": model, "responseId": new_id("gem_standin_")}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StandIn

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str | None, Any]], done: bool = False) -> None:
        chunks = []
        for name, data in events:
            chunks.append((f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n")
        if done:
            chunks.append("data: [DONE]\n\n")
        data = "".join(chunks).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json_array(self, chunks: list[dict[str, Any]]) -> None:
        data = ("[" + ",\r\n".join(json.dumps(c) for c in chunks) + "]").encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _gemini(self, path: str, query: str, body: dict[str, Any]) -> None:
        model, _, method = path.rsplit("/", 1)[-1].partition(":")
        if model in ("rate-limited", "broken"):
            status, code = (429, "RESOURCE_EXHAUSTED") if model == "rate-limited" else (500, "INTERNAL")
            return self._send(status, {"error": {"code": status, "message": "stand-in error", "status": code}})
        if method == "countTokens":
            return self._send(200, {"totalTokens": 1950})
        if method == "generateContent":
            return self._send(200, gemini_response(body, model))
        if method == "streamGenerateContent":
            chunks = gemini_chunks(body, model)
            return self._sse([(None, c) for c in chunks]) if "alt=sse" in query else self._json_array(chunks)
        return self._send(404, {"error": {"code": 404, "message": f"no route {path}", "status": "NOT_FOUND"}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        path, _, query = self.path.partition("?")
        self.server.requests.append((path, body))
        self.server.queries.append(query)
        self.server.headers.append({k.lower(): v for k, v in self.headers.items()})
        if ":" in path.rsplit("/", 1)[-1]:
            return self._gemini(path, query, body)
        anthropic = path.endswith("/messages")
        model = body.get("model")
        if model == "rate-limited":
            error = ({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}} if anthropic
                     else {"error": {"message": "slow down", "type": "rate_limit_exceeded", "code": None}})
            return self._send(429, error, {"retry-after": "0"})
        if model == "broken":
            error = ({"type": "error", "error": {"type": "api_error", "message": "internal"}} if anthropic
                     else {"error": {"message": "internal", "type": "server_error", "code": None}})
            return self._send(500, error)
        stream = bool(body.get("stream"))
        if path.endswith("/messages/count_tokens"):
            return self._send(200, {"input_tokens": 1950})
        if anthropic:
            return self._sse(anthropic_events(body)) if stream else self._send(200, anthropic_message(body))
        if path.endswith("/chat/completions"):
            return self._sse([(None, c) for c in chat_chunks(body)], done=True) if stream else self._send(
                200, chat_completion(body))
        if path.endswith("/responses"):
            self.server.last_response = body
            return self._sse(response_events(body)) if stream else self._send(200, response(body))
        return self._send(404, {"error": {"message": f"no route {path}"}})

    def do_GET(self) -> None:
        # GET /v1/responses/<id>: the last Responses request's response (a stored response) under
        # that id, as JSON, or its whole event sequence with ?stream=true (the SDK's resumed stream).
        path, _, query = self.path.partition("?")
        self.server.requests.append((path, {}))
        self.server.queries.append(query)
        self.server.headers.append({k.lower(): v for k, v in self.headers.items()})
        if "/responses/" not in path:
            return self._send(404, {"error": {"message": f"no route {path}"}})
        body, stored = self.server.last_response, path.rsplit("/", 1)[-1]
        return self._sse(response_events(body, stored)) if "stream=true" in query else self._send(
            200, response(body, response_id=stored))


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []  # each request's (names in lower case), in order
        self.queries: list[str] = []  # each request's query string, in order
        self.last_response: dict[str, Any] = {"model": "gpt-4o"}
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
