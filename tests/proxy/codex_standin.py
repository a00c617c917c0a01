"""A stand-in Responses API for the real Codex CLI (``codex exec``), streamed as Codex asks for
it (``POST /v1/responses``, ``stream: true``, server-sent events).

Codex sends its instructions as ``developer`` messages at the head of ``input`` (no
``instructions`` field), then an ``<environment_context>`` user message and the prompt; its
tools are functions (``exec_command``, ``write_stdin``, ...), a ``namespace`` of sub-agent tools
and ``web_search``. A request whose prompt (the last text of the last user message) names a file
(``read <path>``) and that carries no tool output after it is answered with a ``function_call``
of ``exec_command`` running ``cat <path>``; a request whose last input item is a
``function_call_output`` with a final text quoting the output's first line of the file; any
request whose last user text is Codex's compaction prompt (:data:`COMPACTION_ASK`, the request
it sends when its history reaches ``model_auto_compact_token_limit``) with :data:`SUMMARY`; any
other prompt with ``Noted: <prompt>``. Usage is counted from the request, as a provider would:
the input is its tools and input items as JSON over four characters a token, of which the
part shared with the previous request of the same ``prompt_cache_key`` is cached; the output is
the answer's JSON over four. Every response, message and function call has an id of its own
(response ids hold a token of the stand-in's, so two sessions' calls never share one).
Each request's path, headers and JSON body are kept (``received``), each answer's usage in
``usages``; every other path answers 404 in OpenAI's error shape.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMPACTION_ASK = "CONTEXT CHECKPOINT COMPACTION"
SUMMARY = "Summary: the user asked what the note says; it was read and quoted."
# What a file starts with in the command output Codex returns; the stand-in quotes the next line.
OUTPUT_MARK = "Output:\n"


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [str(p.get("text", "")) for p in content or [] if isinstance(p, dict) and "text" in p]


def prompt_of(items: list[Any]) -> str:
    """The last text of the last user message: what the user just asked."""
    users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"]
    texts = _texts(users[-1].get("content")) if users else []
    return texts[-1] if texts else ""


def tool_output(items: list[Any]) -> str | None:
    """The output of the last item when it is a function call's output (the CLI ran the tool)."""
    last = items[-1] if items else {}
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        output = last.get("output")
        return output if isinstance(output, str) else "\n".join(_texts(output))
    return None


def answer(body: dict[str, Any], number: int) -> dict[str, Any]:
    """The one output item of the answer (``number``: the request's, for its ids): a function
    call or an assistant message."""
    items = body.get("input") or []
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items
    output = tool_output(items)
    if output is not None:
        body_text = output.split(OUTPUT_MARK, 1)[-1]
        first = next((line for line in body_text.splitlines() if line.strip()), "")
        return _message(f"The note says: {first.strip()}", number)
    prompt = prompt_of(items)
    if COMPACTION_ASK in prompt:
        return _message(SUMMARY, number)
    wanted = re.search(r"read (/\S+)", prompt)
    if wanted:
        return {"type": "function_call", "id": f"fc_standin_{number}", "status": "completed",
                "call_id": f"call_standin_{number}", "name": "exec_command",
                "arguments": json.dumps({"cmd": f"cat {wanted.group(1)}"})}
    return _message(f"Noted: {prompt.strip().splitlines()[-1][:80]}" if prompt.strip() else "Hello", number)


def _message(text: str, number: int) -> dict[str, Any]:
    return {"type": "message", "id": f"msg_standin_{number}", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def usage_of(body: dict[str, Any], item: dict[str, Any], previous: str) -> tuple[dict[str, Any], str]:
    """The answer's usage, and the request's text as counted (``previous``: the text of the
    previous request of the same cache key, whose shared prefix is read from the cache)."""
    sent = json.dumps([body.get("tools"), body.get("input")])
    cached = len(os.path.commonprefix([sent, previous])) // 4
    input_tokens, output_tokens = len(sent) // 4, len(json.dumps(item)) // 4
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens}, sent


def events(body: dict[str, Any], number: int, response_id: str, item: dict[str, Any],
           usage: dict[str, Any]) -> list[dict[str, Any]]:
    """The event sequence of one streamed response: created, the output item, completed."""
    response = {"id": response_id, "object": "response", "created_at": 1796557300 + number,
                "model": body.get("model"), "status": "in_progress", "output": [], "usage": None}
    out = [{"type": "response.created", "response": response},
           {"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress"}}]
    if item["type"] == "message":
        text = item["content"][0]["text"]
        out.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
                    "content_index": 0, "delta": text})
    out.append({"type": "response.output_item.done", "output_index": 0, "item": item})
    out.append({"type": "response.completed",
                "response": {**response, "status": "completed", "output": [item], "usage": usage}})
    return [{**e, "sequence_number": n} for n, e in enumerate(out)]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CodexStandIn

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _keep(self, body: Any) -> int:
        with self.server.lock:
            self.server.received.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                         body))
            return len(self.server.received)

    def do_GET(self) -> None:
        self._keep(None)
        self._json(404, {"error": {"message": "not here", "type": "invalid_request_error", "code": None}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        number = self._keep(body)
        if self.path.split("?")[0] != "/v1/responses" or not isinstance(body, dict) or not body.get("stream"):
            return self._json(404, {"error": {"message": "not here", "type": "invalid_request_error", "code": None}})
        item = answer(body, number)
        key = str(body.get("prompt_cache_key") or "")
        response_id = f"resp_{self.server.token}_{number}"
        with self.server.lock:
            usage, self.server.last_sent[key] = usage_of(body, item, self.server.last_sent.get(key, ""))
            self.server.usages[response_id] = usage
        data = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
                        for e in events(body, number, response_id, item, usage))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class CodexStandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, str, dict[str, str], Any]] = []
        self.token = uuid.uuid4().hex[:12]  # in every response id: no two stand-ins answer with the same
        self.usages: dict[str, dict[str, Any]] = {}  # response id -> the usage it reported
        self.last_sent: dict[str, str] = {}  # prompt_cache_key -> its last request, as counted
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> CodexStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
