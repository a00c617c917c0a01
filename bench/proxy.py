"""What ``ctxkit proxy`` adds to a streamed model call, recording against forwarding only, and
whether its memory stays flat.

    .venv/bin/python bench/proxy.py [--calls 600] [--rounds 10] [--memory-calls 10000]
                                    [--first-byte-ms 50] [--event-gap-ms 2]

Five processes on this machine: a paced stand-in provider (the Anthropic events of
tests/proxy/provider_standin.py, chunked, the first after ``--first-byte-ms``, then one every
``--event-gap-ms``); an accept-all ctxview sink in a process of its own (as ctxview is);
``python -m ctxkit.proxy`` in front of the stand-in, recording (every call mapped to a manifest
and sent in batches to the sink); a second proxy recording nothing (no ctxview key), to tell
forwarding from recording; and this load generator (aiohttp, 1 and 32 concurrent streams, one
keep-alive session per target). Each call is a streamed Anthropic Messages request of about
6 KB (a 3 KB system prompt, tools, a ten-message conversation). The three targets (direct and
through each proxy) take turns in short rounds, the order rotating, so that they share the
machine's load; per cell:

1. time to first byte (request sent -> first body bytes) and total time (-> end of stream),
   p50 and p99, and the difference proxy - direct of each (what the proxy adds);
2. **the ratio recording / forwarding only** of what each proxy adds to the first byte, p50 and
   p99 (1.0: recording adds nothing to forwarding; on a loaded machine the absolute figures move,
   the ratio much less);
3. the recording proxy's resident memory (RSS) every 1,000 calls over ``--memory-calls`` calls.

``--first-byte-ms 0 --event-gap-ms 0`` makes it a saturation test instead (every stream
answered at once, so 32 streams keep the proxy's one event loop busy all the time). Not a
test: figures vary with the machine; compare the differences within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.support import wait_port  # noqa: E402

SYSTEM = "\n".join(f"Rule {n}: answer with the order id and never promise refunds above 200 EUR." for n in range(40))
TOOLS = [{"name": f"tool_{n}", "description": "Look something up", "input_schema": {"type": "object"}}
         for n in range(4)]
MESSAGES: list[dict] = [{"role": "user", "content": "Where is parcel 55-1207?"}]
for k in range(4):
    MESSAGES += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{k}", "name": f"tool_{k}",
                                                    "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{k}",
                                                          "content": f"status {k}: in transit " * 20}]}]
MESSAGES.append({"role": "user", "content": "Please hurry."})
BODY = json.dumps({"model": "claude-sonnet-5-5", "max_tokens": 1024, "system": SYSTEM, "tools": TOOLS,
                   "messages": MESSAGES, "stream": True}).encode()
HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "sk-ant-bench",
           "x-ctxview-run": "bench"}



def serve_upstreams(provider_port: int, sink_port: int, first_byte_ms: float, event_gap_ms: float) -> None:
    """The paced stand-in provider and/or (port 0: not) an accept-all ctxview sink, in this
    (separate) process."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from tests.proxy.provider_standin import anthropic_events

    class Provider(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            time.sleep(first_byte_ms / 1000)  # the model thinking before its first token
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for n, (name, data) in enumerate(anthropic_events(body)):
                if n and event_gap_ms:
                    time.sleep(event_gap_ms / 1000)
                chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

    class Sink(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

    for handler, port in ((Provider, provider_port), (Sink, sink_port)):
        if not port:
            continue
        server = ThreadingHTTPServer(("127.0.0.1", port), handler, bind_and_activate=False)
        server.request_queue_size = 512  # 32 streams connecting at once must not overflow the backlog
        server.daemon_threads = True
        server.server_bind()
        server.server_activate()
        threading.Thread(target=server.serve_forever, daemon=True).start()
    while True:
        time.sleep(3600)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as found:
            return [int(child) for child in found.read().split()]
    except OSError:
        return []


def cpu_seconds(pid: int, with_children: bool = True) -> float:
    """CPU time of ``pid`` and (unless told not to) its children (the recording proxy's recorder)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + (sum(cpu_seconds(child) for child in children(pid)) if with_children else 0.0)


def settle(pid: int) -> None:
    """Wait until ``pid`` and its children are idle (the recorder has caught up)."""
    for _ in range(100):
        before = cpu_seconds(pid)
        time.sleep(0.2)
        if cpu_seconds(pid) - before < 0.02:
            return


async def one_call(session: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    start = time.perf_counter()
    async with session.post(url, data=BODY, headers=HEADERS) as response:
        first = await response.content.readany()
        ttfb = time.perf_counter() - start
        assert response.status == 200 and first, response.status
        while await response.content.readany():
            pass
    return ttfb, time.perf_counter() - start


async def load(session: aiohttp.ClientSession, url: str, calls: int, concurrency: int
               ) -> tuple[list[float], list[float]]:
    ttfbs: list[float] = []
    totals: list[float] = []
    remaining = [calls]

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            ttfb, total = await one_call(session, url)
            ttfbs.append(ttfb)
            totals.append(total)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ttfbs, totals


def new_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False)


async def load_once(url: str, calls: int, concurrency: int) -> tuple[list[float], list[float]]:
    async with new_session() as session:
        return await load(session, url, calls, concurrency)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] * 1000


def start_proxy(upstream: str, port: int, sink: str | None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'sdk'}{os.pathsep}{ROOT}"}
    env.pop("CTXVIEW_API_KEY", None)
    if sink:  # every call is mapped to a manifest and sent, in batches, to the accept-all sink
        env.update(CTXVIEW_API_KEY="ctx_bench", CTXVIEW_HOST=sink)
    process = subprocess.Popen([sys.executable, "-m", "ctxkit.proxy", "--port", str(port), "--anthropic-upstream",
                                upstream], env=env, stderr=subprocess.DEVNULL)
    wait_port(port)
    return process


def added(values: list[float], base: list[float]) -> tuple[float, float]:
    """What a proxy adds at p50 and p99, ms."""
    return pct(values, 50) - pct(base, 50), pct(values, 99) - pct(base, 99)


def ratio(recording: float, forwarding: float) -> str:
    """Recording's added time over forwarding's; a proxy measured faster than direct adds 0."""
    if forwarding <= 0:
        return "n/a (forwarding adds nothing measurable)"
    return f"{max(recording, 0.0) / forwarding:.2f}x"


async def measure(targets: dict[str, str], pids: dict[str, int], calls: int, rounds: int, concurrency: int
                  ) -> tuple[dict[str, tuple[list[float], list[float]]], dict[str, tuple[float, float]]]:
    """Each target in turn, ``rounds`` times (the order rotating), ``calls`` calls in all per target;
    the timings, and the CPU ms per call of each target's process and of its children."""
    got: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in targets}
    own = dict.fromkeys(targets, 0.0)
    total = dict.fromkeys(targets, 0.0)
    names = list(targets)
    sessions = {name: new_session() for name in names}
    try:
        for name in names:  # open the keep-alive connections
            await load(sessions[name], targets[name], concurrency, concurrency)
            settle(pids[name])
        per_round = max(concurrency, calls // rounds)
        for turn in range(rounds):
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                before = cpu_seconds(pids[name], False), cpu_seconds(pids[name])
                ttfbs, totals = await load(sessions[name], targets[name], per_round, concurrency)
                settle(pids[name])  # the recorder catches up before the next target's turn
                own[name] += (cpu_seconds(pids[name], False) - before[0]) * 1000 / (per_round * rounds)
                total[name] += (cpu_seconds(pids[name]) - before[1]) * 1000 / (per_round * rounds)
                got[name][0].extend(ttfbs)
                got[name][1].extend(totals)
    finally:
        for session in sessions.values():
            await session.close()
    return got, {name: (own[name], total[name] - own[name]) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=600, help="calls per target and concurrency")
    parser.add_argument("--rounds", type=int, default=10, help="turns each target takes per concurrency")
    parser.add_argument("--memory-calls", type=int, default=10_000)
    parser.add_argument("--first-byte-ms", type=float, default=50.0,
                        help="the stand-in's wait before the first event (the model's time to first token)")
    parser.add_argument("--event-gap-ms", type=float, default=2.0, help="the stand-in's gap between events")
    parser.add_argument("--serve-upstreams", nargs=2, type=int, metavar=("PROVIDER_PORT", "SINK_PORT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstreams:
        serve_upstreams(*args.serve_upstreams, args.first_byte_ms, args.event_gap_ms)
        return

    standin_port, sink_port, proxy_port, bare_port = free_port(), free_port(), free_port(), free_port()
    pacing = ["--first-byte-ms", str(args.first_byte_ms), "--event-gap-ms", str(args.event_gap_ms)]
    standin = subprocess.Popen([sys.executable, __file__, "--serve-upstreams", str(standin_port), "0", *pacing])
    sink = subprocess.Popen([sys.executable, __file__, "--serve-upstreams", "0", str(sink_port), *pacing])
    wait_port(standin_port)
    wait_port(sink_port)
    upstream = f"http://127.0.0.1:{standin_port}"
    proxy = start_proxy(upstream, proxy_port, f"http://127.0.0.1:{sink_port}")
    bare = start_proxy(upstream, bare_port, None)
    targets = {"direct": f"{upstream}/v1/messages", "proxy": f"http://127.0.0.1:{proxy_port}/v1/messages",
               "proxy, not recording": f"http://127.0.0.1:{bare_port}/v1/messages"}
    pids = {"direct": standin.pid, "proxy": proxy.pid, "proxy, not recording": bare.pid}
    try:
        asyncio.run(load_once(targets["proxy"], 50, 4))  # warm up: connections, imports, the first manifests
        asyncio.run(load_once(targets["proxy, not recording"], 50, 4))
        print(f"request body {len(BODY)} bytes; stand-in: first event after {args.first_byte_ms} ms, then "
              f"{args.event_gap_ms} ms between events; {args.calls} calls per cell in {args.rounds} turns; "
              f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}; ms")
        for concurrency in (1, 32):
            got, cpu = asyncio.run(measure(targets, pids, args.calls, args.rounds, concurrency))
            base_ttfb, base_total = got["direct"]
            print(f"\n{concurrency} concurrent stream(s)")
            print(f"  {'':22} {'TTFB p50':>9} {'p99':>7} {'total p50':>10} {'p99':>7}   "
                  f"{'+TTFB p50':>9} {'+p99':>6} {'+total p50':>10} {'+p99':>6}   CPU ms/call (+ recorder)")
            for name, (ttfbs, totals) in got.items():
                row = [pct(ttfbs, 50), pct(ttfbs, 99), pct(totals, 50), pct(totals, 99)]
                more = [*added(ttfbs, base_ttfb), *added(totals, base_total)]
                extra = "" if name == "direct" else "   " + " ".join(
                    f"{v:+{w}.2f}" for v, w in zip(more, (9, 6, 10, 6), strict=True))
                extra = extra or " " * 37
                by_recorder = f" + {cpu[name][1]:.2f}" if cpu[name][1] else ""
                print(f"  {name:22} {row[0]:9.2f} {row[1]:7.2f} {row[2]:10.2f} {row[3]:7.2f}{extra}   "
                      f"{cpu[name][0]:.2f}{by_recorder}")
            recording = added(got["proxy"][0], base_ttfb)
            forwarding = added(got["proxy, not recording"][0], base_ttfb)
            print(f"  added to TTFB, recording / forwarding only: p50 {ratio(recording[0], forwarding[0])}, "
                  f"p99 {ratio(recording[1], forwarding[1])} (goal <= 1.2x)")
        print(f"  load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")

        print("  (CPU ms/call: of the process answering, and of the recording proxy's recorder process; "
              "for direct, the stand-in provider)")
        print(f"\nproxy RSS over {args.memory_calls} calls (32 concurrent), MiB, each reading once the recorder "
              f"has caught up: the proxy's process, its recorder's")
        settle(proxy.pid)
        recorder = next(c for c in children(proxy.pid) if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes())
        print(f"  after warm-up: {rss_mib(proxy.pid):.1f} {rss_mib(recorder):.1f}")
        done = 0
        while done < args.memory_calls:
            batch = min(1000, args.memory_calls - done)
            asyncio.run(load_once(targets["proxy"], batch, 32))
            done += batch
            settle(proxy.pid)
            print(f"  {done:>6} calls: {rss_mib(proxy.pid):.1f} {rss_mib(recorder):.1f}")
    finally:
        for process in (proxy, bare, standin, sink):
            process.terminate()
            process.wait(10)


if __name__ == "__main__":
    main()
