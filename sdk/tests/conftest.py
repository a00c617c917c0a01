"""Shared helpers of the sdk tests: a minimal manifest, and a local HTTP receiver that implements
the ingestion contract (idempotent on call_id, per-manifest results, 207 when mixed) and can be
told to fail, hang, stop and restart on the same port."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ctxkit.manifest import Budget, Item, Manifest, convert_manifest

API_KEY = "test-key"


def make_manifest(call_id: str, items: int = 0) -> Manifest:
    return Manifest(
        schema="ctxview.manifest/v1",
        call_id=call_id,
        run_id="r1",
        step=0,
        model="m",
        started_at=datetime.now(UTC),
        budget=Budget(window=8000),
        items=[Item(id=f"i{n}", kind="history", action="keep", requested_tokens=10) for n in range(items)],
    )


class IngestServer:
    """POST /api/v1/manifests with the server's contract, in a thread."""

    def __init__(self, api_key: str = API_KEY) -> None:
        self.api_key = api_key
        self.lock = threading.Lock()
        self.stored: dict[str, dict] = {}
        self.duplicates = 0
        self.requests: list[dict] = []  # one per request: encoding, raw_size, count, status
        self.failures: list[tuple[int, str | None]] = []
        self.hang = threading.Event()
        self.hang.set()  # set = answer at once; clear it to make handlers wait
        self.arrived = threading.Event()
        self.port = 0
        self.httpd: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                server.handle(self)

        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        httpd.daemon_threads = True
        self.port = httpd.server_address[1]
        self.httpd = httpd
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def fail_next(self, count: int, status: int, retry_after: str | None = None) -> None:
        with self.lock:
            self.failures.extend([(status, retry_after)] * count)

    def ids(self) -> set[str]:
        with self.lock:
            return set(self.stored)

    def wait_for(self, count: int, timeout: float = 5.0) -> bool:
        return wait_until(lambda: len(self.ids()) >= count, timeout)

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length", "0")))
        self.arrived.set()
        self.hang.wait(10)
        record = {"encoding": h.headers.get("Content-Encoding"), "count": 0, "raw_size": len(raw)}
        with self.lock:
            self.requests.append(record)
            failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            record["status"] = failure[0]
            extra = {"Retry-After": failure[1]} if failure[1] else {}
            return self.answer(h, failure[0], {"error": "told to fail"}, extra)
        if h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self.answer(h, 401, {"error": "bad key"})
        if h.headers.get("Content-Type") != "application/json":
            return self.answer(h, 415, {"error": "wrong type"})
        if record["encoding"] == "gzip":
            raw = gzip.decompress(raw)
        record["raw_size"] = len(raw)
        try:
            doc = json.loads(raw)
        except ValueError:
            return self.answer(h, 400, {"error": "malformed"})
        batch = doc["manifests"] if isinstance(doc, dict) and "manifests" in doc else [doc]
        record["count"] = len(batch)
        results = []
        with self.lock:
            for obj in batch:
                manifest, errors = convert_manifest(obj)
                if manifest is None:
                    results.append({"call_id": None, "status": "rejected", "errors": [e.path for e in errors]})
                elif manifest.call_id in self.stored:
                    self.duplicates += 1
                    results.append({"call_id": manifest.call_id, "status": "duplicate", "errors": []})
                else:
                    self.stored[manifest.call_id] = obj
                    results.append({"call_id": manifest.call_id, "status": "accepted", "errors": []})
        counts = {s: sum(r["status"] == s for r in results) for s in ("accepted", "duplicate", "rejected")}
        body = {"results": results, "accepted": counts["accepted"], "duplicates": counts["duplicate"]}
        body["rejected"] = counts["rejected"]
        record["status"] = 207 if counts["rejected"] and len(results) > counts["rejected"] else 200
        self.answer(h, record["status"], body)

    @staticmethod
    def answer(h: BaseHTTPRequestHandler, status: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(data)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def server() -> Iterator[IngestServer]:
    srv = IngestServer()
    yield srv
    srv.hang.set()
    srv.stop()
