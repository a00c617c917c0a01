"""ctxkit benchmark (not a test): what building a context and its manifest costs the agent.

    .venv/bin/python bench/sdk.py [--candidates 200] [--repeat 100] [--calls 50000] [--no-restart] [--clock wall|cpu]

1. For N candidates (default 200: history turns, tool results, retrieved chunks, memory, pinned
   system/task, tool schemas; Chinese and English), the time of ``allocate`` + ``build_manifest``
   as a ratio to ``json.dumps`` of the same manifest as a dict (``msgspec.to_builtins``), at an
   ample budget (everything fits) and a tight one (most candidates compressed). Targets: <= 5x;
   <= 6x on texts never seen; the ``ContextBuilder`` pipeline <= 4.5x. ``allocate`` keeps its
   per-text work (content keys, CJK counts, line dedupe, line ranking) across calls, as an agent
   loop re-allocates mostly the same texts at every step: the main figures are that steady state;
   "cold" is a first call on texts never seen (cache cleared).
   Also the whole ``ContextBuilder`` pipeline (allocate, layout, read-back, manifest) and the
   builder alone, with and without the server's check (the default runs it only on hand-made parts).
2. ``capture()`` latency of that manifest, p50/p99 (target p99 < 50 us), against a local dummy
   server (``bench/sdk_capture.py``), and that script's server-restart check with the spool on.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sdk_capture  # the client author's benchmark: dummy server, restart check

from ctxkit import Client, ContextBuilder, KeyField, Segment, allocate, build_manifest
from ctxkit.context.allocator import cache as alloc_cache
from ctxkit.fixtures import SYSTEM, TASK, TOOLS
from ctxkit.manifest import ItemKind, Manifest

# The goals docs/performance.md holds the figures to, as ratios to json.dumps of the same manifest.
TARGET_RATIO = 5.0  # allocate + build_manifest on texts seen before
TARGET_COLD = 6.0  # the same on texts never seen (an agent's first call)
TARGET_PIPELINE = 4.5  # ContextBuilder, texts seen before
TARGET_P99_US = 50.0
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


KINDS: tuple[ItemKind, ...] = ("history", "history", "tool_result", "retrieval", "memory")  # in turn


def candidates(n: int, seed: int = 7) -> list[Segment]:
    """A deterministic agent context of ``n`` candidates (n >= 3)."""
    rnd = random.Random(seed)
    segs = [
        Segment(name="system", kind="system", text=SYSTEM, priority=100, policy="pin"),
        Segment(name="task", kind="task", text=TASK, priority=95, policy="pin"),
        Segment(name="tools", kind="tools", text=TOOLS, priority=60, policy="schema", min_tokens=60),
    ]
    chunks = [f"退款率 口径说明 {k}：按自然季度统计，金额单位为分，数据源 bi://refund/v{k % 3}。" for k in range(8)]
    for i in range(n - len(segs)):
        kind: ItemKind = KINDS[i % 5]
        if kind == "history":
            text = f"{'user' if i % 2 else 'assistant'}: step {i} — " + rnd.choice(
                ["查询 app 渠道退款率", "error=HTTP 429 retry_after=20s", "换算为元：金额除以 100", "ok, continue"]
            ) + " " + "detail " * rnd.randrange(5, 40)
            seg = Segment(name=f"turn-{i}", kind=kind, text=text, priority=20 + i // 8, policy="summarize")
        elif kind == "tool_result":
            lines = [f"tool=bi_query row={j} channel={rnd.choice(['app', 'web', 'offline'])} "
                     f"refund_rate={rnd.random():.4f} amount_fen={rnd.randrange(10**6)} status="
                     f"{rnd.choice(['ok', 'ok', 'error code=429'])}" for j in range(rnd.randrange(4, 30))]
            seg = Segment(name=f"tool-{i}", kind=kind, text="\n".join(lines), priority=rnd.randrange(10, 60),
                          policy="truncate", trust="untrusted", source_ref=f"log#{i}")
        elif kind == "retrieval":
            text = "\n".join(rnd.choice(chunks) for _ in range(rnd.randrange(2, 10)))
            seg = Segment(name=f"doc-{i}", kind=kind, text=text, priority=rnd.randrange(20, 70), policy="extract",
                          trust="untrusted", source_ref=f"web#{i}")
        else:
            seg = Segment(name=f"mem-{i}", kind=kind, text=f"记忆 {i}: 用户偏好 {rnd.random():.3f}；不得访问外网。",
                          priority=rnd.randrange(30, 80), policy="drop")
        segs.append(seg)
    return segs


FIELDS = [KeyField("rate limit", "429"), KeyField("unit", "除以 100"), KeyField("no network", "不得访问外网")]


# Wall clock by default. ``--clock cpu`` times every figure, the json.dumps baseline included, by the
# CPU time of this thread: on a shared machine with a load average several times its cores, a call
# of a few ms is preempted in almost every run, and the wall clock then measures the scheduler.
CLOCK: Callable[[], float] = time.perf_counter


def best_interleaved(fns: dict[str, tuple[Callable[[], object], Callable[[], object] | None]],
                     repeat: int) -> dict[str, float]:
    """The least seconds of each of ``fns`` (name: (fn, setup or None)) over ``repeat`` runs, made in
    rounds that time every fn ``BURST`` times in turn: a slow spell of this shared machine (the same
    ``json.dumps`` can take twice as long a few seconds later, even on a quiet machine)
    then falls on the baseline and the figures alike, instead of on whichever was being timed."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    clock = CLOCK
    for _ in range(max(1, repeat // BURST)):
        for name, (fn, setup) in fns.items():
            for _ in range(BURST):  # a few in a row: each figure is timed with its data in the CPU's caches
                if setup is not None:
                    setup()
                t0 = clock()
                fn()
                times[name].append(clock() - t0)
    return {name: min(t) for name, t in times.items()}


BURST = 5


def bench_build(n: int, repeat: int) -> Manifest:
    segs = candidates(n)
    total = sum(s.text and len(s.text) for s in segs)
    print(f"== building: {n} candidates, {total} characters of candidate text ==")
    manifest: Manifest | None = None
    for label, budget in (("ample budget", 400_000), ("tight budget", 12_000)):
        reserve = budget // 5

        def alloc_and_build(budget: int = budget, reserve: int = reserve) -> object:
            plan = allocate(segs, budget=budget, reserve=reserve)
            return build_manifest(call_id="bench", run_id="bench", step=0, model="m", plan=plan, started_at=T0)

        plan = allocate(segs, budget=budget, reserve=reserve)
        m = build_manifest(call_id="bench", run_id="bench", step=0, model="m", plan=plan, started_at=T0)
        as_dict = msgspec.to_builtins(m)
        cb = ContextBuilder(budget=budget, reserve=reserve, key_fields=FIELDS)
        t = best_interleaved({
            "dumps": (lambda d=as_dict: json.dumps(d), None),
            "alloc": (lambda b=budget, r=reserve: allocate(segs, budget=b, reserve=r), None),
            "build_v": (lambda p=plan: build_manifest(call_id="b", run_id="b", step=0, model="m", plan=p,
                                                      started_at=T0, validate=True), None),
            "build_nv": (lambda p=plan: build_manifest(call_id="b", run_id="b", step=0, model="m", plan=p,
                                                       started_at=T0, validate=False), None),
            "both": (alloc_and_build, None),
            "cold": (lambda b=budget, r=reserve: allocate(segs, budget=b, reserve=r), alloc_cache.clear),
            "cold_both": (alloc_and_build, alloc_cache.clear),  # an agent's first call: texts never seen
            "pipeline": (lambda cb=cb: cb.build(segs).manifest(call_id="b", run_id="b", step=0, model="m",
                                                               started_at=T0), None),
        }, repeat)
        dumps, alloc, build_v, build_nv = t["dumps"], t["alloc"], t["build_v"], t["build_nv"]
        both, cold, cold_both, pipeline = t["both"], t["cold"], t["cold_both"], t["pipeline"]
        squeezed = sum(1 for a in plan.allocations if a.action not in ("keep", "compress"))
        print(f"{label}: budget={budget} used={plan.used} squeezed={squeezed}/{n} "
              f"manifest={len(json.dumps(as_dict))} bytes of JSON")
        print(f"  json.dumps(manifest dict)            {dumps * 1e3:8.3f} ms   1.00x")
        verdict = "OK" if both / dumps <= TARGET_RATIO else "OVER TARGET"
        print(f"  allocate + build_manifest            {both * 1e3:8.3f} ms  {both / dumps:5.2f}x  "
              f"(target <= {TARGET_RATIO:.0f}x: {verdict})")
        verdict = "OK" if cold_both / dumps <= TARGET_COLD else "OVER TARGET"
        print(f"  allocate + build_manifest, cold      {cold_both * 1e3:8.3f} ms  {cold_both / dumps:5.2f}x  "
              f"(first call, texts never seen; target <= {TARGET_COLD:.0f}x: {verdict})")
        print(f"    allocate alone                     {alloc * 1e3:8.3f} ms  {alloc / dumps:5.2f}x")
        print(f"    allocate alone, cold (no cache)    {cold * 1e3:8.3f} ms  {cold / dumps:5.2f}x")
        print(f"    build_manifest (validate=True)     {build_v * 1e3:8.3f} ms  {build_v / dumps:5.2f}x")
        print(f"    build_manifest (validate=False)    {build_nv * 1e3:8.3f} ms  {build_nv / dumps:5.2f}x")
        verdict = "OK" if pipeline / dumps <= TARGET_PIPELINE else "OVER TARGET"
        print(f"  ContextBuilder: allocate, layout, read-back, budget check, manifest "
              f"{pipeline * 1e3:.3f} ms  {pipeline / dumps:.2f}x  (target <= {TARGET_PIPELINE}x: {verdict})")
        manifest = m
    assert manifest is not None
    return manifest


def bench_capture(manifest: Manifest, calls: int, restart: bool) -> None:
    print(f"== capture(): {calls} calls of a {len(manifest.items)}-item manifest built above ==")
    server = sdk_capture.DummyServer()
    try:
        # A queue that holds every call: the measured path is a normal enqueue, not the
        # queue-full overflow (which is what a 100k burst against the default 10k queue measures).
        client = Client("bench", server.url, max_queue=calls + 10)
        manifests = [msgspec.structs.replace(manifest, call_id=f"cap-{k}") for k in range(calls)]
        client.capture(manifests[0])  # start the worker thread outside the measurement
        timings = [0] * calls
        clock = time.perf_counter_ns
        for k, m in enumerate(manifests):
            t0 = clock()
            client.capture(m)
            timings[k] = clock() - t0
        client.flush(120)
        client.shutdown(5)
        timings.sort()
        p50, p99 = sdk_capture.percentile(timings, 0.50), sdk_capture.percentile(timings, 0.99)
        verdict = "OK" if p99 < TARGET_P99_US else "OVER TARGET"
        stats = client.stats()
        print(f"  capture() latency us: p50={p50:.2f} p99={p99:.2f} max={timings[-1] / 1000:.0f} "
              f"(target p99 < {TARGET_P99_US:.0f} us: {verdict})")
        print(f"  sent={stats['sent']} dropped={stats['dropped']} spooled={stats['spooled']}")
        if restart:
            sdk_capture.bench_restart(server, 500, 50)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--no-restart", action="store_true", help="skip the server-restart-with-spool check")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="time the building figures by wall clock or by this thread's CPU time (a loaded machine)")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "cpu" else time.perf_counter
    print(f"clock: {args.clock}")
    manifest = bench_build(max(3, args.candidates), args.repeat)
    bench_capture(manifest, args.calls, not args.no_restart)


if __name__ == "__main__":
    main()
