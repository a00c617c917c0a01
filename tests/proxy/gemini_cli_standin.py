"""A stand-in Gemini API for the real Gemini CLI (``gemini -p``), answering as the CLI asks:
``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` for the turn (server-sent events,
one ``GenerateContentResponse`` each) and ``:generateContent`` on a small model for its side
requests (the router's complexity score, the next-speaker check, ...), which ask for JSON
(``generationConfig.responseJsonSchema``) and get an object filled from that schema.

A turn whose prompt (the last text of the last user content) names a file (``read <path>``)
and that carries no function response after it is answered with a ``functionCall`` of the CLI's
``read_file`` tool for that file; a turn whose last content holds a ``functionResponse`` with a
text quoting the file's first line; any other prompt with ``Noted: <prompt>``. The CLI's
compression requests (their system instruction asks for a ``<state_snapshot>``) get
:data:`SUMMARY`, which keeps that the note was read and leaves out what it said.

Usage is counted from the request (:func:`usage_of`: a character count over four, the system
instruction and tools read from the cache) and the answer, with :data:`THOUGHTS` reasoning tokens
on every turn; each response has an id of its own (``responseId``). ``:countTokens`` counts the
same way; every other path 404 in Google's error shape. Each request's method, path (with its
query), headers and JSON body are kept (``received``), and each answer with its path and body
(``answers``).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

THOUGHTS = 12  # reasoning tokens every turn reports (side requests report none)
READ_TOOL = "read_file"
# What the CLI's compression prompt asks for, and the stand-in's summary: it keeps that a note was
# read and leaves out what it said (the refund rate).
SNAPSHOT = "<state_snapshot>"
SUMMARY = ("<state_snapshot>\n<overall_goal>Answer the user's questions about note.txt.</overall_goal>\n"
           "<key_knowledge>note.txt was read.</key_knowledge>\n</state_snapshot>")


def _texts(content: Any) -> list[str]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [str(p["text"]) for p in parts or [] if isinstance(p, dict) and isinstance(p.get("text"), str)]


def prompt_of(contents: list[Any]) -> str:
    """The last text of the last user content: what the user just asked."""
    users = [c for c in contents if isinstance(c, dict) and c.get("role", "user") == "user" and _texts(c)]
    texts = _texts(users[-1]) if users else []
    return texts[-1] if texts else ""


def function_response(contents: list[Any]) -> dict[str, Any] | None:
    """The response of the last content when it answers a function call (the CLI ran the tool)."""
    last = contents[-1] if contents else {}
    for part in last.get("parts") or [] if isinstance(last, dict) else []:
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            return part["functionResponse"]
    return None


def filled(schema: Any) -> Any:
    """A value that satisfies a JSON schema (Gemini's ``type`` names in either case)."""
    if not isinstance(schema, dict):
        return None
    kind = str(schema.get("type", "object")).lower()
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: filled(sub) for name, sub in props.items()}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 10
    if kind == "boolean":
        return False
    return "stand-in"


def turn_parts(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of the turn's answer: a function call or a text."""
    contents = body.get("contents") or []
    response = function_response(contents)
    if response is not None:
        output = json.dumps(response.get("response"))
        content = (response.get("response") or {}).get("output")
        text = content if isinstance(content, str) else output
        first = next((line for line in text.splitlines() if line.strip()), "")
        return [{"text": f"The note says: {first.strip()}"}]
    prompt = prompt_of(contents)
    wanted = re.search(r"read (/\S+)", prompt)
    declared = {d.get("name") for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []}
    if wanted and READ_TOOL in declared:
        return [{"functionCall": {"name": READ_TOOL, "args": {"file_path": wanted.group(1)}}}]
    return [{"text": f"Noted: {prompt.strip().splitlines()[-1][:80]}" if prompt.strip() else "Hello"}]


def _tokens(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False)) // 4 if value else 0


def usage_of(body: dict[str, Any], parts: list[dict[str, Any]], thoughts: int = 0) -> dict[str, int]:
    """The answer's ``usageMetadata``: the prompt counted from the request (system instruction,
    tools and contents, a character count over four; ``promptTokenCount`` includes the cached
    system instruction and tools), the answer from its parts."""
    cached = _tokens(body.get("systemInstruction")) + _tokens(body.get("tools"))
    prompt = cached + _tokens(body.get("contents"))
    answer = max(1, _tokens(parts))
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": answer, "totalTokenCount": prompt + answer + thoughts}
    if cached:
        usage["cachedContentTokenCount"] = cached
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def _asks_summary(body: dict[str, Any]) -> bool:
    system = body.get("systemInstruction")
    return SNAPSHOT in json.dumps(system) if system else False


def generate(body: dict[str, Any], model: str) -> dict[str, Any]:
    """One ``GenerateContentResponse``: a side request's JSON, a compression's summary, or the turn's answer."""
    schema = (body.get("generationConfig") or {}).get("responseJsonSchema") \
        or (body.get("generationConfig") or {}).get("responseSchema")
    if schema is not None:
        parts = [{"text": json.dumps(filled(schema))}]
        usage = usage_of(body, parts)
    elif _asks_summary(body):
        parts = [{"text": SUMMARY}]
        usage = usage_of(body, parts)
    else:
        parts = turn_parts(body)
        usage = usage_of(body, parts, THOUGHTS)
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage, "modelVersion": model, "responseId": f"standin-{uuid.uuid4().hex[:20]}"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: GeminiStandIn

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, data: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._send(404, json.dumps({"error": {"code": 404, "message": "not here", "status": "NOT_FOUND"}}).encode())

    def _keep(self, body: Any) -> None:
        with self.server.lock:
            self.server.received.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                         body))

    def do_GET(self) -> None:
        self._keep(None)
        self._not_found()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self._keep(body)
        route = re.fullmatch(r"/v1(?:beta)?/models/([^/:]+):(\w+)", self.path.split("?")[0])
        if not route or not isinstance(body, dict):
            return self._not_found()
        model, method = route.groups()
        if method == "countTokens":
            return self._send(200, json.dumps({"totalTokens": usage_of(body, [])["promptTokenCount"]}).encode())
        if method not in ("generateContent", "streamGenerateContent"):
            return self._not_found()
        answer = generate(body, model)
        with self.server.lock:
            self.server.answers.append((self.path, body, answer))
        if method == "generateContent":
            return self._send(200, json.dumps(answer).encode())
        text_parts = answer["candidates"][0]["content"]["parts"]
        # The first event carries the answer, the last the finish reason and the usage.
        first = {"candidates": [{"content": {"role": "model", "parts": text_parts}, "index": 0}],
                 "modelVersion": model, "responseId": answer["responseId"]}
        last = {"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP",
                                "index": 0}], "usageMetadata": answer["usageMetadata"], "modelVersion": model,
                "responseId": answer["responseId"]}
        if "alt=sse" in self.path:
            data = b"".join(f"data: {json.dumps(e)}\r\n\r\n".encode() for e in (first, last))
            return self._send(200, data, "text/event-stream")
        return self._send(200, json.dumps([first, last]).encode())


class GeminiStandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, str, dict[str, str], Any]] = []
        self.answers: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # (path, request, answer)
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> GeminiStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
