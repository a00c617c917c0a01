"""A stand-in Messages API for the real Claude Code CLI (``claude -p``), streamed as Claude Code
asks for it (``POST /v1/messages?beta=true``, ``stream: true``).

A request whose last user turn holds no tool result and whose prompt (the last text of the last
user message) names a file (``read <path>``) is answered with a ``tool_use`` of Claude Code's
``Read`` tool for that file; a request carrying the tool's result is answered with a final text
quoting the file's first line; a prompt ``delegate: <task>`` with a ``tool_use`` of Claude Code's
sub-agent tool (``Agent``, or ``Task``) whose prompt is ``SUBTASK: <task>``, the sub-agent's
request (its first user message opens with :data:`SUBTASK`) with ``Done: <task>``, and the
sub-agent's report coming back with ``The sub-agent reports: Done: <task>``; Claude Code's
compaction request (``/compact``) with a summary that leaves out what the note said
(:data:`SUMMARY`); any other prompt with ``Noted: <prompt>``, and a request without one with a
short text. ``sized_usage=True`` counts the usage from the request (:func:`usage_of`: cache reads
as far as it repeats the session's last request), so the calls after a compaction report fewer
tokens and a call's items account for nearly all of its input; ``full_window_on``
makes the answer to a prompt holding it report a full window (Claude Code then compacts by itself
at the start of its next run), ``cold_on`` one that read nothing from the cache. Every other path
answers 404 in Anthropic's error shape. Each answer has an id of its own (``msg_…``), as
Anthropic's do: the proxy stores a call under it. Each request's path, headers and JSON body are kept
(``received``) so a test can see what the CLI sends.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"input_tokens": 40, "cache_read_input_tokens": 9000, "cache_creation_input_tokens": 700, "output_tokens": 20}
# Input tokens that leave Claude Code's model (a 1M-token window) too little room: it compacts.
FULL_WINDOW = 985_000
# The prompt the stand-in gives a sub-agent starts with this; the sub-agent's requests open with it.
SUBTASK = "SUBTASK:"
# Claude Code's compaction request (``/compact``, or its own on a full window) ends with this ask.
SUMMARY_REQUEST = "Your task is to create a detailed summary of the conversation so far"
# The stand-in's summary keeps that a note was read and leaves out what it said (the refund rate).
SUMMARY = ("<analysis>The user had a note read and asked about it.</analysis>\n<summary>\n"
           "1. Primary Request and Intent: the user asked to read note.txt and say what it says.\n"
           "2. Files and Code Sections: note.txt was read.\n"
           "3. Pending Tasks: none.\n</summary>")


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            out.extend(_texts(block.get("content")))
    return out


def _tool_result(messages: list[Any]) -> str | None:
    last = messages[-1] if messages else {}
    for block in last.get("content") or [] if isinstance(last.get("content"), list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            return "\n".join(_texts(block.get("content")))
    return None


def _prompt(messages: list[Any]) -> str:
    """The last text block of the last user message: what the user just asked (Claude Code puts
    its reminders in earlier blocks of the same message)."""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    texts = _texts(users[-1].get("content")) if users else []
    return texts[-1] if texts else ""


def _first_prompt(messages: list[Any]) -> str:
    """The last text block of the first user message: the task a sub-agent was started with."""
    first = next((m for m in messages if isinstance(m, dict) and m.get("role") == "user"), {})
    texts = _texts(first.get("content"))
    return texts[-1] if texts else ""


def _delegated(messages: list[Any]) -> bool:
    """Whether the last assistant turn asked for a sub-agent (the tool result is its report)."""
    assistants = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    content = assistants[-1].get("content") if assistants else None
    return any(isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in ("Agent", "Task")
               for b in content if isinstance(content, list)) if content else False


def answer(body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The content blocks of the answer, and its stop reason."""
    messages = body.get("messages") or []
    if _first_prompt(messages).startswith(SUBTASK):  # the sub-agent's own request
        return [{"type": "text", "text": f"Done: {_first_prompt(messages)[len(SUBTASK):].strip()}"}], "end_turn"
    if SUMMARY_REQUEST in _prompt(messages):  # the ask may share its message with a tool result
        return [{"type": "text", "text": SUMMARY}], "end_turn"
    result = _tool_result(messages)
    if result is not None and _delegated(messages):
        done = next((line for line in result.splitlines() if "Done:" in line), "")  # past Claude Code's frame
        return [{"type": "text", "text": f"The sub-agent reports: {done.strip()}"}], "end_turn"
    if result is not None:
        first = next((line for line in result.splitlines() if line.strip()), "")
        first = re.sub(r"^\s*\d+[→\t]", "", first)  # Read numbers its lines
        return [{"type": "text", "text": f"The note says: {first.strip()}"}], "end_turn"
    prompt = _prompt(messages)
    wanted = re.search(r"read (/\S+)", prompt)
    tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    task = re.match(r"delegate: (.+)", prompt.strip())
    agent_tool = next((name for name in ("Agent", "Task") if name in tools), "")
    if task and agent_tool:
        calls = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        return [{"type": "tool_use", "id": f"toolu_standin_agent_{calls + 1}", "name": agent_tool,
                 "input": {"description": "Delegated task", "prompt": f"{SUBTASK} {task.group(1)}",
                           "subagent_type": "general-purpose", "run_in_background": False}}], "tool_use"
    if wanted and "Read" in tools:
        calls = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
        return [{"type": "tool_use", "id": f"toolu_standin_{calls + 1}", "name": "Read",
                 "input": {"file_path": wanted.group(1)}}], "tool_use"
    if prompt.strip():
        return [{"type": "text", "text": f"Noted: {prompt.strip().splitlines()[-1][:80]}"}], "end_turn"
    return [{"type": "text", "text": "Reading a note"}], "end_turn"


def usage_of(body: dict[str, Any], sized: bool, full_window_on: str = "", cold_on: str = "",
             previous: str = "") -> tuple[dict[str, int], str]:
    """The answer's usage and the request as counted. Fixed, or (``sized``) counted from the
    request as the provider would: a token per four characters of its tools, system and messages
    in prefix order; the part up to the last ``cache_control`` mark is cacheable, read from the
    cache as far as it repeats ``previous`` (the same session's last request) and written beyond,
    the rest uncached; so the calls after a compaction report fewer tokens. A prompt holding
    ``full_window_on`` reports a window all but full (FULL_WINDOW), so the CLI compacts on its
    own before its next call; one holding ``cold_on`` reads nothing from the cache and writes what
    it would have read (a prompt the provider had no cached prefix for)."""
    sent = json.dumps([body.get("tools"), body.get("system"), body.get("messages")])
    usage = dict(USAGE)
    if sized:
        cacheable = max(sent.rfind('"cache_control"'), 0)
        read = min(len(os.path.commonprefix([sent, previous])), cacheable) // 4
        written = cacheable // 4 - read
        usage = {**usage, "input_tokens": len(sent) // 4 - read - written, "cache_read_input_tokens": read,
                 "cache_creation_input_tokens": written}
    prompt = _prompt(body.get("messages") or [])
    if full_window_on and full_window_on in prompt:
        usage = {**usage, "input_tokens": FULL_WINDOW}
    if cold_on and cold_on in prompt:
        usage = {**usage, "cache_read_input_tokens": 0,
                 "cache_creation_input_tokens": usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]}
    return usage, sent


def events(body: dict[str, Any], usage: dict[str, int] = USAGE) -> list[tuple[str, dict[str, Any]]]:
    blocks, stop = answer(body)
    message = {"id": f"msg_cc_standin_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
               "model": body.get("model"),
               "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}
    out: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": message})]
    for index, block in enumerate(blocks):
        if block["type"] == "tool_use":
            out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {**block, "input": {}}}))
            out.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        else:
            out.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}}))
            out.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": {"type": "text_delta", "text": block["text"]}}))
        out.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    out.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                  "usage": usage}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ClaudeCodeStandIn

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _keep(self, body: Any) -> None:
        with self.server.lock:
            self.server.received.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                         body))

    def do_GET(self) -> None:
        self._keep(None)
        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not here"}})

    def do_HEAD(self) -> None:
        self._keep(None)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        self._keep(body)
        path = self.path.split("?")[0]
        if path == "/v1/messages/count_tokens":
            return self._json(200, {"input_tokens": 9740})
        if path != "/v1/messages" or not isinstance(body, dict):
            return self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "not here"}})
        session = self.headers.get("X-Claude-Code-Session-Id", "")
        with self.server.lock:
            usage, self.server.last_sent[session] = usage_of(
                body, self.server.sized_usage, self.server.full_window_on, self.server.cold_on,
                self.server.last_sent.get(session, ""))
        if not body.get("stream"):
            blocks, stop = answer(body)
            return self._json(200, {"id": f"msg_cc_standin_{uuid.uuid4().hex}", "type": "message", "role": "assistant",
                                    "model": body.get("model"), "content": blocks, "stop_reason": stop,
                                    "stop_sequence": None, "usage": usage})
        data = b"".join(f"event: {name}\ndata: {json.dumps(event)}\n\n".encode()
                        for name, event in events(body, usage))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ClaudeCodeStandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, sized_usage: bool = False, full_window_on: str = "", cold_on: str = "") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.sized_usage = sized_usage
        self.full_window_on = full_window_on
        self.cold_on = cold_on
        self.received: list[tuple[str, str, dict[str, str], Any]] = []
        self.last_sent: dict[str, str] = {}  # each session's last request, as counted
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> ClaudeCodeStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
