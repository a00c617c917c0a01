"""instrument()'s cost to the agent's call, with the ctxview server down.

    .venv/bin/python bench/instrument.py [--calls 1000] [--rounds 5]

The real openai client (Chat Completions) calls the local stand-in provider
(tests/proxy/provider_standin.py, TCP_NODELAY) with a realistic request: a 3 KB system prompt,
four tools and a ten-message conversation. ctxkit's Client points at a closed port, so every
send fails and is retried in the background, the worst case for the agent. Measured, in the
same run and in alternating rounds (median of rounds):

1. end to end: the time per call of the plain client and of the instrumented client;
2. on the agent's thread only: what the wrapper adds around the SDK call (taking the
   ``ctxview`` keyword, the run scope and step, a shallow copy of the request, a queue put),
   timed around a function that returns at once, as a ratio to that bare function call.

Not a test: figures vary with the machine; the differences and ratios are what to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402

import ctxkit  # noqa: E402
from ctxkit import Client  # noqa: E402
from ctxkit.instrumentation.recorder import Recorder  # noqa: E402
from ctxkit.instrumentation.wrap import wrap  # noqa: E402
from ctxkit.providers.openai_chat import chat_manifest  # noqa: E402
from tests.proxy.provider_standin import StandIn  # noqa: E402

SYSTEM = "\n".join(f"Rule {n}: answer with the order id and never promise refunds above 200 EUR." for n in range(40))
TOOLS = [{"type": "function", "function": {"name": f"tool_{n}", "parameters": {"type": "object"}}} for n in range(4)]
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Where is parcel 55-1207?"}]
for k in range(4):
    MESSAGES += [{"role": "assistant", "content": None, "tool_calls": [
                  {"id": f"c{k}", "type": "function", "function": {"name": f"tool_{k}", "arguments": "{}"}}]},
                 {"role": "tool", "tool_call_id": f"c{k}", "content": f"status {k}: in transit " * 20}]
MESSAGES.append({"role": "user", "content": "Please hurry."})


def per_call(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    down = Client("ctx_bench", "http://127.0.0.1:9", max_retries=0, timeout=0.5, max_queue=100_000)
    with StandIn() as provider:
        plain = openai.OpenAI(api_key="sk-bench", base_url=f"{provider.url}/v1", max_retries=0)
        instrumented = ctxkit.instrument(openai.OpenAI(api_key="sk-bench", base_url=f"{provider.url}/v1",
                                                       max_retries=0), ctxkit_client=down)
        request = dict(model="gpt-4o", messages=MESSAGES, tools=TOOLS)
        for client in (plain, instrumented):  # warm connections and imports
            for _ in range(20):
                client.chat.completions.create(**request)
        plain_t, inst_t = [], []
        for _ in range(args.rounds):
            plain_t.append(per_call(lambda: plain.chat.completions.create(**request), args.calls))
            inst_t.append(per_call(lambda: instrumented.chat.completions.create(**request), args.calls))
        ctxkit.instrument.flush(30)
    recorded = down.stats()

    # The agent's-thread part alone: the same wrapping (a hook on the resource's _post, create
    # taking ctxview out) around an SDK-shaped resource whose request returns at once.
    class Resource:
        def __init__(self) -> None:
            self._post = lambda path, **kwargs: kwargs

        def create(self, **kwargs):
            return self._post("/chat/completions", body=kwargs, stream=False)

    bare, wrapped = Resource(), Resource()
    sink = Recorder(down, agent="bench", run_id="bench", include_text=True, window=None, max_queue=10**7)
    sink.background._thread = threading.current_thread()  # records pile up unbuilt: no builder thread competes
    wrap(wrapped, ("/chat/completions",), sink, chat_manifest)
    n, bare_runs, wrap_runs = 2000, [], []
    for _ in range(args.rounds * 4):  # min of many short rounds: the least disturbed by a busy machine
        bare_runs.append(per_call(lambda: bare.create(**request), n))
        wrap_runs.append(per_call(lambda: wrapped.create(**request), n))
        assert len(sink.background.buffer) == n, "every wrapped call must have been recorded"
        sink.background.buffer.clear()
    bare_t, wrap_t = min(bare_runs), min(wrap_runs)
    down.shutdown(timeout=1)

    p, i = statistics.median(plain_t), statistics.median(inst_t)
    print(f"{args.calls} calls x {args.rounds} rounds, ctxview down (closed port), stand-in provider on loopback; "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"end to end: plain {p * 1e6:8.1f} µs/call, instrumented {i * 1e6:8.1f} µs/call, "
          f"difference {(i - p) * 1e6:+.1f} µs ({i / p:.3f}x); spread of plain rounds "
          f"{(max(plain_t) - min(plain_t)) * 1e6:.1f} µs")
    print(f"agent's thread: bare call {bare_t * 1e6:.2f} µs, wrapped {wrap_t * 1e6:.2f} µs: "
          f"+{(wrap_t - bare_t) * 1e6:.2f} µs per call ({wrap_t / bare_t:.1f}x of a bare call)")
    print(f"manifests captured {recorded['captured']}, sent {recorded['sent']}, dropped {recorded['dropped']}")


if __name__ == "__main__":
    main()
