"""ctxkit client benchmark: what ``capture()`` costs the caller, and whether a
server restart loses anything when a spool is configured.

    .venv/bin/python bench/sdk_capture.py [--calls 100000] [--items 200]

Prints capture() latency percentiles in microseconds (the caller's cost only:
encoding, gzip and HTTP happen on the worker thread), the client's counters,
and one "server restart with spool on: N sent, N lost" line. Not a test.
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgspec

from ctxkit.manifest import Budget, Item, Manifest
from ctxkit.record.client import Client

KEY = "bench"


class DummyServer:
    """Accepts every batch, remembers call_ids; can stop and restart on the same port."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.lock = threading.Lock()
        self.port = 0
        self.httpd: ThreadingHTTPServer | None = None
        self.start()

    def start(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    raw = gzip.decompress(raw)
                batch = msgspec.json.decode(raw)["manifests"]
                with server.lock:
                    fresh = [m["call_id"] for m in batch if m["call_id"] not in server.ids]
                    server.ids.update(fresh)
                body = msgspec.json.encode(
                    {"results": [], "accepted": len(fresh), "duplicates": len(batch) - len(fresh), "rejected": 0}
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        assert self.httpd is not None
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def manifest(call_id: str, items: int) -> Manifest:
    return Manifest(
        schema="ctxview.manifest/v1",
        call_id=call_id,
        run_id="bench",
        step=0,
        model="m",
        started_at=datetime.now(UTC),
        budget=Budget(window=128_000),
        items=[
            Item(id=f"i{n}", kind="history", action="keep", requested_tokens=100, used_tokens=100, reason="fits")
            for n in range(items)
        ],
    )


def percentile(sorted_values: list[int], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] / 1000


def bench_latency(server: DummyServer, calls: int, items: int) -> None:
    client = Client(KEY, server.url)
    # Distinct call_ids, one shared item list: building manifests is the agent's cost, not capture()'s.
    template = manifest("t", items)
    manifests = [msgspec.structs.replace(template, call_id=f"lat-{n}") for n in range(calls)]
    size = len(msgspec.json.encode(template))
    timings = [0] * calls
    clock = time.perf_counter_ns
    start = time.perf_counter()
    for n, m in enumerate(manifests):
        t0 = clock()
        client.capture(m)
        timings[n] = clock() - t0
    elapsed = time.perf_counter() - start
    flushed = client.flush(120)
    drained = time.perf_counter() - start
    client.shutdown(5)
    timings.sort()
    stats = client.stats()
    print(f"capture() of a {items}-item manifest ({size} bytes JSON), {calls} calls in {elapsed:.2f} s")
    print(
        f"  latency us: p50={percentile(timings, 0.50):.2f} p99={percentile(timings, 0.99):.2f} "
        f"p99.9={percentile(timings, 0.999):.2f} max={timings[-1] / 1000:.0f}"
    )
    print(
        f"  flushed={flushed} sent={stats['sent']} dropped={stats['dropped']} (queue full: capture outran the "
        f"worker) spooled={stats['spooled']} retries={stats['retries']}"
    )
    rate = stats["sent"] / drained
    print(f"  worker throughput: {rate:.0f} manifests/s ({rate * size / 1e6:.1f} MB/s of JSON)")


def bench_restart(server: DummyServer, count: int, items: int) -> None:
    with tempfile.TemporaryDirectory() as spool_dir:
        client = Client(KEY, server.url, spool_dir=spool_dir, max_retries=2, backoff_base=0.05, backoff_cap=0.2)
        ids = [f"rst-{n}" for n in range(count)]
        half = count // 2
        for call_id in ids[:half]:
            client.capture(manifest(call_id, items))
        client.flush(30)
        server.stop()  # outage: the rest is retried, then spooled
        for call_id in ids[half:]:
            client.capture(manifest(call_id, items))
        client.flush(60)
        server.start()  # same port
        client.capture(manifest("rst-after", items))  # a successful send triggers the replay
        ids.append("rst-after")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not set(ids) <= server.ids:
            time.sleep(0.05)
        client.shutdown(5)
        stats = client.stats()
    got = len(set(ids) & server.ids)
    print(
        f"server restart with spool on: {got} sent, {len(ids) - got} lost "
        f"(spooled={stats['spooled']} replayed={stats['replayed']} dropped={stats['dropped']})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--restart-count", type=int, default=2_000)
    args = parser.parse_args()
    server = DummyServer()
    try:
        bench_latency(server, args.calls, args.items)
        bench_restart(server, args.restart_count, args.items)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
