"""Scale-out, shown: two web nodes and two Celery worker nodes sharing one PostgreSQL and one
Redis, against one of each in the same run, then an exactly-once check with a worker killed.

    .venv/bin/python bench/cluster.py [--manifests 3000] [--items 20] [--batch 50] [--threads 8]
        [--port 8170] [--redis redis://127.0.0.1:6379/7] [--keep]

Creates a scratch database (``<name>_bench_cluster`` for DATABASE_URL=.../<name>, else
ctxview_cluster; dropped at the end unless --keep) and uses the
given Redis database (flushed before and after). A node is what one 2-core machine would run:
a web node is gunicorn with 2 workers, a worker node a Celery prefork worker of concurrency 2;
one beat runs on its own. Three phases, each with a project of its own and fresh processes:

1. one web node + one worker node: the manifests posted once each by the client threads, each
   run's calls in step order in consecutive batches (as agents send them);
2. two web nodes (two ports) + two worker nodes (``-n w1``, ``-n w2``): the same load, the
   client threads split between the two nodes;
3. the same two-node cluster with faults and the worst order: the calls shuffled (a run's calls
   spread over many concurrent batches, met in any order), 20 % of the batches re-sent (half at
   once to the other web node, half later), worker node w2 SIGKILLed a third of the way through (and
   restarted a visibility timeout later, so its unacknowledged tasks are redelivered), web
   node B SIGKILLed half way (restarted 2 s later; its clients fail over to node A).

Clients retry refused or cut connections (on the other node) and 503/429, as ctxkit's does.
Throughput of a phase: manifests / seconds from the first send until every call is analysed
(and the ingest rate alone); the 2-node / 1-node ratio of phases 1 and 2 is printed.

The exactly-once check (all three phases, :func:`exactly_once`): every sent call stored once
and analysed (0 lost, 0 unanalysed, 0 quarantined); one figures row per call; each call's
attributions equal to those the reference derives from its raw manifest
(tests/analysis/figures_reference.py): cause and step lost at; the prefix registry counting each
call once; every hour and day
rollup equal to the raw aggregate the reference computes from the manifests. From the worker
logs: tasks redelivered (received twice) and what their second run analysed (0: the calls were
done), tasks cut by the kill. The sweep runs every 5 s for calls older than 10 s, the
visibility timeout is 30 s (production: 60 s, 60 s, 3600 s; docs/deploy.md).
Exits 1 when the check fails. Not a test: the figures go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.support import (
    PG,
    Client,
    Processes,
    backend_cpu_seconds,
    create_database,
    create_key,
    drop_database,
    group_cpu_seconds,
    scratch_database_name,
)

DB = scratch_database_name("cluster", "ctxview_cluster")
T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
VISIBILITY_TIMEOUT = 30
KINDS = ["system", "task", "history", "tool_result", "retrieval"]
ACTIONS = ["keep", "keep", "summarize", "truncate", "drop"]


def manifest(phase: str, n: int, items: int, runs: int, rng: random.Random) -> dict:
    step = n // runs
    return {
        "schema": "ctxview.manifest/v1",
        "call_id": f"{phase}-{n}",
        "run_id": f"{phase}-run-{n % runs}",
        "step": step,
        "agent": f"agent-{n % 3}",
        "model": ["claude-sonnet-4-5", "gpt-4o"][n % 2],
        "started_at": (T0 + timedelta(seconds=step * 60 + rng.randrange(0, 50))).isoformat(),
        "budget": {"window": 64000, "output_reserve": 2000, "safety_margin": 500},
        "prefix": {
            "hash": f"{n % 7:064x}",
            "tokens": 1500,
            "segments": [{"name": "system", "hash": "a" * 64, "tokens": 1500}],
        },
        "usage": {"input_tokens": 9000, "cache_read_tokens": 1500 * (n % 3), "output_tokens": 300},
        "items": [
            {
                "id": f"i{k}",
                "kind": KINDS[k % 5],
                "action": ACTIONS[(k + n) % 5],
                "requested_tokens": 400 + k,
                "granted_tokens": 300 + k,
                "used_tokens": 300 + k,
                "position": k,
                "reason": "budget",
            }
            for k in range(items)
        ],
        "evidence": [
            {"key": "rate-limit", "present": n % 4 != 0, "expected_item": "i3"},
            {"key": f"ticket-{n % 5}", "present": n % 6 != 0, "expected_item": "i4"},
        ],
        "outcome": {"status": "ok", "verified": "yes" if n % 2 else "unknown"},
    }


@dataclass
class Phase:
    name: str
    webs: int
    workers: int
    faults: bool = False
    project: str = ""
    key: str = ""
    ingest_seconds: float = 0.0
    drain_seconds: float = 0.0
    tally: Counter = field(default_factory=Counter)
    health: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per component


class Cluster:
    """The processes of one phase: beat, worker nodes w1..wM, web nodes on port, port+1, ..."""

    def __init__(self, processes: Processes, phase: Phase, port: int) -> None:
        self.p, self.phase = processes, phase
        self.ports = [port + i for i in range(phase.webs)]
        self.webs: dict[int, object] = {}
        self.workers: dict[str, object] = {}
        self.incarnation: Counter[str] = Counter()

    def log_name(self, node: str) -> str:
        return f"{self.phase.project}-{node}.{self.incarnation[node]}"

    def start_worker(self, node: str) -> None:
        self.incarnation[node] += 1
        name = self.log_name(node)
        self.workers[node] = self.p.worker(node, concurrency=2, log=name)
        deadline = time.monotonic() + 60
        while "ready." not in (self.p.logs / f"{name}.log").read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise SystemExit(f"worker {node} did not start; see {self.p.logs / name}.log")
            time.sleep(0.2)

    def start_web(self, port: int) -> None:
        self.webs[port] = self.p.web(port, workers=2, name=f"{self.phase.project}-web-{port}", log_level="warning")

    def start(self) -> None:
        self.beat = self.p.beat(f"{self.phase.project}-beat")
        for n in range(self.phase.workers):
            self.start_worker(f"w{n + 1}")
        for port in self.ports:
            self.start_web(port)

    def stop(self) -> None:
        for process in [*self.webs.values(), *self.workers.values(), self.beat]:
            self.p.stop(process)


def run_phase(phase: Phase, cluster: Cluster, docs: list[dict], args: argparse.Namespace, conn) -> None:
    rng = random.Random(args.seed)
    batches = [json.dumps({"manifests": docs[i : i + args.batch]}).encode() for i in range(0, len(docs), args.batch)]
    sends: list[tuple[bytes, int | None]] = []  # (body, web node to use, None: the thread's own)
    later: list[tuple[bytes, int | None]] = []
    for index, body in enumerate(batches):
        sends.append((body, None))
        if phase.faults and rng.random() < 0.2:
            # A retry racing the original on the other web node (the next free thread), or later.
            (sends if rng.random() < 0.5 else later).append((body, (index + 1) % len(cluster.ports)))
    sends += later
    work: queue.Queue = queue.Queue()
    for item in sends:
        work.put(item)
    for _ in range(args.threads):
        work.put(None)
    lock = threading.Lock()
    done = [0]

    def client_thread(n: int) -> None:
        client = Client(cluster.ports, phase.key, phase.tally, lock, first=n)  # keeps its fail-overs
        while (item := work.get()) is not None:
            body, node = item
            if node is None:
                client.send(body)
            else:
                Client(cluster.ports, phase.key, phase.tally, lock, first=node).send(body)
            with lock:
                done[0] += 1

    def chaos() -> None:
        total = len(sends)
        while done[0] < total // 3:
            time.sleep(0.05)
        Processes.kill(cluster.workers["w2"])
        killed_at = time.monotonic()
        phase.tally["worker kills (SIGKILL)"] += 1
        while done[0] < total // 2:
            time.sleep(0.05)
        port = cluster.ports[1]
        Processes.kill(cluster.webs[port])
        phase.tally["web node kills (SIGKILL)"] += 1
        time.sleep(2)
        cluster.start_web(port)
        # Restart w2 once its unacknowledged tasks are past the visibility timeout: the new
        # node restores them at start-up, so the redelivery is seen within the run.
        time.sleep(max(0.0, killed_at + VISIBILITY_TIMEOUT + 2 - time.monotonic()))
        cluster.start_worker("w2")

    def cpu() -> dict[str, float]:
        return {
            "web nodes": sum(group_cpu_seconds(p.pid) for p in cluster.webs.values()),
            "worker nodes + beat": sum(group_cpu_seconds(p.pid) for p in [*cluster.workers.values(), cluster.beat]),
            "PostgreSQL (their backends)": backend_cpu_seconds(conn),
        }

    before = cpu()  # start-up (imports, migrations check) is not the load's
    started = time.monotonic()
    threads = [threading.Thread(target=client_thread, args=(n,)) for n in range(args.threads)]
    chaos_thread = threading.Thread(target=chaos, daemon=True) if phase.faults else None
    for t in threads + ([chaos_thread] if chaos_thread else []):
        t.start()
    for t in threads:
        t.join()
    phase.ingest_seconds = time.monotonic() - started
    one = lambda sql: conn.execute(sql, (phase.project,)).fetchone()[0]  # noqa: E731
    waiting = (
        "SELECT count(*) FROM manifests_call c JOIN manifests_project p ON p.id = c.project_id "
        "WHERE p.name = %s AND c.analyzed_at IS NULL AND c.quarantined_at IS NULL"
    )
    while one(waiting) and time.monotonic() - started < 900:
        time.sleep(0.2)
    phase.drain_seconds = time.monotonic() - started
    phase.cpu = {name: seconds - before[name] for name, seconds in cpu().items()}
    if chaos_thread:
        chaos_thread.join(timeout=120)
        wait_for_redeliveries(args.redis)
    phase.tally["stored"] = one(
        "SELECT count(*) FROM manifests_call c JOIN manifests_project p ON p.id = c.project_id WHERE p.name = %s"
    )


def wait_for_redeliveries(redis_url: str, timeout: float = 120) -> None:
    """Until no task is queued or held unacknowledged (the redelivered ones have run)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not client.llen("celery") and not client.hlen("unacked"):
            return
        time.sleep(0.5)


TASK = re.compile(r"Task manifests\.tasks\.(\w+)\[([0-9a-f-]+)\] (received|succeeded in [0-9.]+s: (\S+))")


def task_log(log_dir: Path, project: str) -> dict[str, int]:
    """From the worker logs of a phase: tasks received, redelivered, cut by a kill, and the
    calls analysed by the second run of a redelivered task."""
    received: Counter[str] = Counter()
    finished: dict[str, list[str]] = {}
    sweeps: set[str] = set()
    cut = 0
    for path in sorted(log_dir.glob(f"{project}-w*.log")):
        mine_received, mine_done = set(), set()
        for name, task_id, what, result in TASK.findall(path.read_text(errors="replace")):
            if name not in ("analyze_calls", "sweep_unanalysed"):
                continue
            if name == "sweep_unanalysed":
                sweeps.add(task_id)
            if what == "received":
                received[task_id] += 1
                mine_received.add(task_id)
            else:
                finished.setdefault(task_id, []).append(result)
                mine_done.add(task_id)
        cut += len(mine_received - mine_done)
    again = [t for t, n in received.items() if n > 1]
    swept = sum(int(r) for t, results in finished.items() if t in sweeps for r in results if r.isdigit())
    return {
        "calls analysed by the sweep (their task lost or late)": swept,
        "tasks received": len(received),
        "tasks cut by the kill (received, never finished there)": cut,
        "tasks redelivered (received twice)": len(again),
        "calls analysed by a redelivered task's second run": sum(
            int(r) for t in again for r in finished.get(t, [])[-1:] if r.isdigit()
        ),
    }


def flush_rollups() -> None:
    """Bring rollups up to date before they are compared: the analysis marks the buckets it
    touches dirty and the workers' beat refreshes them every CTXVIEW_ROLLUP_INTERVAL_SECONDS;
    the check runs that refresh itself rather than wait for the next beat (docs/analysis.md,
    "Incremental refresh")."""
    from manifests.analysis import rollups

    rollups.refresh()


def exactly_once(project_name: str, call_ids: list[str]) -> dict[str, int]:
    """What the check counts for one project; every figure must be 0."""
    from django.db.models import Count, Sum

    from manifests.models import Attribution, Call, CallFigures, PrefixEntry, Project
    from tests.analysis import figures_reference as reference

    flush_rollups()
    project = Project.objects.get(name=project_name)
    calls = Call.objects.filter(project=project)
    stored = set(calls.values_list("call_id", flat=True))
    refs = reference.calls(project)
    # Each call's attributions as (evidence key, cause, risk or not, step lost at), against the reference's.
    attributions: dict[str, list[tuple]] = {}
    for call_id, key, cause, risk, lost_step in Attribution.objects.filter(call__project=project).values_list(
        "call__call_id", "evidence_key", "cause", "is_risk", "lost_at__step"
    ):
        attributions.setdefault(call_id, []).append((key, cause, risk, lost_step))
    figure_rows = Counter(
        dict(
            CallFigures.objects.filter(call__project=project)
            .values_list("call__call_id")
            .annotate(n=Count("pk"))
            .values_list("call__call_id", "n")
        )
    )
    registry = PrefixEntry.objects.filter(project=project).aggregate(n=Sum("calls"))["n"] or 0
    wrong_buckets = 0
    for bucket in ("hour", "day"):
        expected, actual = reference.buckets(refs, bucket), reference.rollup_rows(project, bucket)
        for key in set(expected) | set(actual):
            want, got = dict(expected.get(key, {})), dict(actual.get(key, {}))
            cost, stored_cost = want.pop("cost", 0.0), got.pop("cost", 0.0)
            usd, stored_usd = want.pop("cost_usd", 0.0), got.pop("cost_usd", 0.0)
            # Costs are float sums rounded to a millionth, USD to a billionth (as
            # tests/analysis/figures_reference.py compares them).
            wrong_buckets += (abs(stored_cost - cost) > 1e-6 * max(1.0, cost) + 1e-6
                              or abs(stored_usd - usd) > 1e-9 * max(1.0, usd) + 1e-9 or want != got)
    return {
        "lost (sent, not stored)": len(set(call_ids) - stored),
        "stored twice": calls.count() - len(stored),
        "unanalysed": calls.filter(analyzed_at__isnull=True).count(),
        "quarantined": calls.filter(quarantined_at__isnull=False).count(),
        "calls without exactly one figures row": sum(1 for c in stored if figure_rows[c] != 1),
        "calls whose attributions differ from the reference": sum(
            1 for c, ref in refs.items() if sorted(attributions.get(c, []), key=repr) != sorted(ref.causes, key=repr)
        ),
        "prefix registry minus calls with a prefix": registry - calls.exclude(prefix_hash="").count(),
        "rollup buckets (hour + day) unequal to the raw aggregate": wrong_buckets,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifests", type=int, default=3000, help="per phase")
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--port", type=int, default=8170, help="web node A; node B is port + 1")
    parser.add_argument("--redis", default=os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/7"))
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--keep", action="store_true", help="keep the database and the logs")
    args = parser.parse_args()

    logs = Path(f"/tmp/ctxview-cluster-{args.port}")
    logs.mkdir(exist_ok=True)
    for old in logs.glob("*"):
        old.unlink()
    env = dict(
        os.environ,
        DATABASE_URL=f"{PG}/{DB}",
        SECRET_KEY="bench-cluster",
        DEBUG="0",
        ALLOWED_HOSTS="127.0.0.1",
        REDIS_URL=args.redis,
        CTXVIEW_SWEEP_INTERVAL="5",
        CTXVIEW_SWEEP_MIN_AGE="10",
        CELERY_VISIBILITY_TIMEOUT=str(VISIBILITY_TIMEOUT),
        PYTHONUNBUFFERED="1",
    )
    env.pop("CTXVIEW_CELERY_KEY_PREFIX", None)
    subprocess.run(["redis-cli", "-u", args.redis, "flushdb"], check=True, capture_output=True)
    create_database(DB, env)
    phases = [
        Phase("1 web node + 1 worker node", 1, 1),
        Phase("2 web nodes + 2 worker nodes", 2, 2),
        Phase("2 + 2, faults: re-sends, w2 and web B SIGKILLed", 2, 2, faults=True),
    ]
    for n, phase in enumerate(phases, 1):
        phase.project = f"cluster-{n}"
        phase.key = create_key(env, phase.project)

    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
    import django
    import psycopg

    django.setup()
    load = os.getloadavg()
    processes = Processes(env, logs)
    checks: dict[str, dict[str, int]] = {}
    try:
        with psycopg.connect(f"{PG}/{DB}", autocommit=True) as conn:
            for n, phase in enumerate(phases, 1):
                rng = random.Random(args.seed + n)
                runs = max(1, args.manifests // 20)
                docs = [manifest(phase.project, k, args.items, runs, rng) for k in range(args.manifests)]
                if phase.faults:
                    rng.shuffle(docs)  # the worst case: a run's calls in many batches, met in any order
                else:
                    docs.sort(key=lambda d: (d["run_id"], d["step"]))  # agents send their runs in step order
                cluster = Cluster(processes, phase, args.port)
                cluster.start()
                try:
                    run_phase(phase, cluster, docs, args, conn)
                    for port in cluster.ports:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
                            figures = json.loads(r.read())
                        phase.health.append(
                            f"/healthz on :{port}: unanalysed {figures['unanalysed_calls']}, "
                            f"quarantined {figures['quarantined_calls']}"
                        )
                finally:
                    cluster.stop()
                phase.tally.update(task_log(logs, phase.project))
                checks[phase.name] = exactly_once(phase.project, [d["call_id"] for d in docs])
                checks[phase.name]["accepted answers beyond one per call"] = max(
                    0, phase.tally["accepted"] - phase.tally["stored"]
                )
    finally:
        processes.stop_all()
        from django.db import connections

        connections.close_all()
        subprocess.run(["redis-cli", "-u", args.redis, "flushdb"], capture_output=True)
        if not args.keep:
            drop_database(DB)

    report(phases, checks, args, load)
    if any(v for check in checks.values() for v in check.values()):
        raise SystemExit("the exactly-once check FAILED")


def report(phases: list[Phase], checks: dict, args: argparse.Namespace, load) -> None:
    print(
        f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} at the start; one PostgreSQL, one Redis; "
        f"a web node = gunicorn x2, a worker node = Celery prefork x2, one beat"
    )
    print(
        f"load per phase: {args.manifests} manifests of {args.items} items in batches of {args.batch}, "
        f"{args.threads} client threads"
    )
    for phase in phases:
        t = phase.tally
        print(f"\n{phase.name}")
        print(f"  ingest     {phase.ingest_seconds:6.1f} s  {args.manifests / phase.ingest_seconds:7.0f} manifests/s")
        print(
            f"  analysed   {phase.drain_seconds:6.1f} s  {args.manifests / phase.drain_seconds:7.0f} manifests/s "
            "end to end (first send to last call analysed)"
        )
        # A web node killed after its batch committed, before it answered: the client's retry
        # of that batch is answered "duplicate", so fewer "accepted" answers than calls stored.
        t["accepted answers lost with a killed web node"] = t["stored"] - t["accepted"]
        for name in (
            "accepted",
            "accepted answers lost with a killed web node",
            "duplicate",
            "rejected",
            "5xx",
            "gave up",
            "connection errors (retried)",
            "503 (retried after Retry-After)",
            "429 (retried after Retry-After)",
            "worker kills (SIGKILL)",
            "web node kills (SIGKILL)",
            "tasks received",
            "tasks cut by the kill (received, never finished there)",
            "tasks redelivered (received twice)",
            "calls analysed by a redelivered task's second run",
            "calls analysed by the sweep (their task lost or late)",
        ):
            always = ("accepted", "duplicate", "5xx") + (
                ("tasks redelivered (received twice)", "calls analysed by a redelivered task's second run")
                if phase.faults
                else ()
            )
            if t[name] or name in always:
                print(f"  {name:<56} {t[name]}")
        for line in phase.health:
            print(f"  {line}")
        cpu = ", ".join(
            f"{name} {seconds:.1f} s ({1000 * seconds / args.manifests:.1f} ms/manifest)"
            for name, seconds in phase.cpu.items()
        )
        # A node killed in the fault phase takes its CPU time with it: there, a lower bound.
        print(f"  CPU during the load{' (at least)' if phase.faults else ''}: {cpu}")
        print("  exactly-once check (each must be 0):")
        for name, value in checks[phase.name].items():
            print(f"    {name:<58} {value}")
    one, two = phases[0], phases[1]
    print(
        f"\nratio 2 nodes / 1 node: ingest {one.ingest_seconds / two.ingest_seconds:.2f}, "
        f"end to end {one.drain_seconds / two.drain_seconds:.2f}"
    )
    ok = not any(v for check in checks.values() for v in check.values())
    print(f"exactly-once check: {'PASSED' if ok else 'FAILED'}")


if __name__ == "__main__":
    main()
