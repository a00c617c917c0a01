"""An upstream for the proxy's hostile-traffic tests: answers the Anthropic Messages path like
tests/proxy/provider_standin.py, plus the failures a real provider or network produces, chosen by the
request's ``model``:

- ``overloaded``: 529 with Anthropic's ``overloaded_error`` body;
- ``reset-mid-stream``: the stream's first events, then a TCP reset (no end of body);
- ``slow-stream``: one event every 20 ms for 10 s; notes when the reader went away;
- ``gzip``: the JSON answer gzip-compressed (``Content-Encoding: gzip``);
- ``headers``: extra end-to-end headers and hop-by-hop ones the proxy must not forward;
- ``stream-error``: a stream that reports ``overloaded_error`` in band (an ``error`` event);
- ``bare`` (streamed or not) and ``untyped``: answers with no ``Date`` and no ``Server`` header (the
  other models get http.server's), ``untyped`` with no ``Content-Type`` either.

A request whose query holds ``trickle`` has its body read in two halves, ``first_half`` set in
between. Every request's raw body and headers are kept (``received``), so a test can compare what
reached the upstream with what the agent sent. A body that is not JSON gets the provider's 400.
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.proxy.provider_standin import anthropic_events, anthropic_message


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HostileUpstream

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _send_bare(self, data: bytes, headers: list[tuple[str, str]]) -> None:
        self.send_response_only(200)  # the status line alone: no Date, no Server
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _events(self, events: list[tuple[str, Any]]) -> list[bytes]:
        return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]

    def _stream_head(self) -> None:
        # Chunked, as the providers send their streams over HTTP/1.1.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _stream(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self._chunk(chunk)
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self) -> None:
        self.server.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, b""))
        self._send(200, json.dumps({"data": [{"id": "claude-x", "type": "model"}]}).encode())

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if "trickle" in self.path:
            raw = self.rfile.read(length // 2)
            self.server.first_half.set()
            raw += self.rfile.read(length - len(raw))
        else:
            raw = self.rfile.read(length)
        self.server.received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, raw))
        try:
            body = json.loads(raw)
            assert isinstance(body, dict)
        except (ValueError, AssertionError):
            error = {"type": "error", "error": {"type": "invalid_request_error",
                                                "message": "There was an issue with the format of your request"}}
            return self._send(400, json.dumps(error).encode(), {"request-id": "req_bad"})
        model = body.get("model")
        if model == "overloaded":
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            return self._send(529, json.dumps(error).encode(), {"request-id": "req_529", "x-should-retry": "true"})
        if model == "gzip":
            return self._send(200, gzip.compress(json.dumps(anthropic_message(body)).encode()),
                              {"Content-Encoding": "gzip"})
        if model == "headers":
            return self._send(200, json.dumps(anthropic_message(body)).encode(),
                              {"request-id": "req_headers", "anthropic-ratelimit-requests-remaining": "99",
                               "X-Custom": "kept", "Keep-Alive": "timeout=5", "Connection": "keep-alive, X-Hop",
                               "X-Hop": "dropped"})
        if model == "reset-mid-stream":
            self._stream_head()
            for chunk in self._events(anthropic_events(body))[:3]:
                self._chunk(chunk)
            time.sleep(0.05)
            # SO_LINGER 0: close() sends a reset instead of a clean end.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            return
        if model == "slow-stream":
            self._stream_head()
            first, *rest = anthropic_events(body)
            try:
                self._chunk(self._events([first])[0])
                for _ in range(500):
                    time.sleep(0.02)
                    self._chunk(b"event: ping\ndata: {\"type\": \"ping\"}\n\n")
                self._stream(self._events(rest))
            except OSError:
                self.server.reader_gone.set()
            return
        if model == "stream-error":
            self._stream_head()
            events = anthropic_events(body)[:2] + [
                ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]
            return self._stream(self._events(events))
        if model == "bare" and body.get("stream"):
            self.send_response_only(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("request-id", "req_bare_stream")
            self.end_headers()
            return self._stream(self._events(anthropic_events(body)))
        if model in ("bare", "untyped"):
            data = json.dumps(anthropic_message(body)).encode()
            typed = [("Content-Type", "application/json")] if model == "bare" else []
            return self._send_bare(data, [*typed, ("Content-Length", str(len(data))), ("request-id", "req_bare")])
        if body.get("stream"):
            self._stream_head()
            return self._stream(self._events(anthropic_events(body)))
        self._send(200, json.dumps(anthropic_message(body)).encode(), {"request-id": "req_ok"})


class HostileUpstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.reader_gone = threading.Event()
        self.first_half = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> HostileUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()
