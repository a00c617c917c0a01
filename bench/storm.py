"""Ingest storm: concurrent overlapping batches, re-sends, cut connections, a killed worker
and a broker outage, then the drain: nothing lost, nothing counted twice.

    .venv/bin/python bench/storm.py [--manifests 10000] [--batch 50] [--threads 8]
        [--port 8140] [--redis-port 8141]

Starts everything it uses, on ports of its own: a redis-server (never the shared one,
which it would have to stop), gunicorn (3 sync workers) on a scratch PostgreSQL database
and a Celery worker with beat (sweep every 5 s, minimum age 5 s). Then 8 client threads
send the manifests in shuffled batches, so concurrent batches share new runs in different
orders and widen their time spans both ways; 20 % of the batches are sent a second time
(half of them at once beside the first send, half later); 2 % of the sends are cut
mid-body by a connection reset first. A client retries 503/429 after Retry-After and a
cut or refused connection, as ctxkit's does; a 5xx is counted, then retried. A quarter of
the way through, the worker is SIGKILLed (and restarted); half way, Redis is stopped for
10 s and comes back empty (its queue lost). When every send is answered, it waits until
no call is left unanalysed and prints:

    accepted, duplicate, 5xx, lost, double-counted, wrong run times,
    unanalysed after the drain, drain time

lost: manifests sent but not stored. double-counted: accepted answers beyond one per
call, plus rows counted more than once in the figures, the day rollups or the prefix
registry. wrong run times: runs whose first_seen/last_seen differ from min/max of their
calls. Drain time: from the last answer to the moment nothing is left unanalysed and no
rollup bucket is left dirty (the beat refreshes them every CTXVIEW_ROLLUP_INTERVAL_SECONDS), with
the backlog left at that moment. Not a test: the figures go into docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.support import PG, Client, Processes, create_database, create_key

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def manifest(n: int, runs: int, rng: random.Random) -> dict:
    return {
        "schema": "ctxview.manifest/v1",
        "call_id": f"storm-{n}",
        "run_id": f"storm-run-{n % runs}",
        "step": n // runs,
        "agent": f"agent-{n % 3}",
        "model": "claude-sonnet-4-5",
        "started_at": (T0 + timedelta(seconds=rng.randrange(0, 6 * 3600))).isoformat(),
        "budget": {"window": 64000, "output_reserve": 2000, "safety_margin": 500},
        "prefix": {"hash": f"{n % 11:064x}", "tokens": 1500,
                   "segments": [{"name": "system", "hash": "a" * 64, "tokens": 1500}]},
        "usage": {"input_tokens": 9000, "cache_read_tokens": 1500, "output_tokens": 300},
        "items": [{"id": f"i{k}", "kind": ["system", "task", "history", "tool_result", "retrieval"][k % 5],
                   "action": ["keep", "keep", "summarize", "truncate", "drop"][k % 5],
                   "requested_tokens": 400 + k, "granted_tokens": 300 + k, "used_tokens": 300 + k,
                   "position": k, "reason": "budget"} for k in range(8)],
        "evidence": [{"key": "rate-limit", "present": n % 4 != 0, "expected_item": "i3"}],
        "outcome": {"status": "ok", "verified": "yes" if n % 2 else "unknown"},
    }


class Services:
    """redis-server, gunicorn and a Celery worker with beat, each in its own process group."""

    def __init__(self, args: argparse.Namespace, env: dict[str, str], logs: Path) -> None:
        self.args, self.processes = args, Processes(env, logs)
        self.redis = self.worker = self.server = None

    def start_redis(self) -> None:
        self.redis = self.processes.redis(self.args.redis_port)

    def start_worker(self) -> None:
        self.worker = self.processes.worker("worker", concurrency=2, beat=True)

    def start_server(self) -> None:
        self.server = self.processes.web(self.args.port, workers=3)

    kill = staticmethod(Processes.kill)

    def stop_all(self) -> None:
        self.processes.stop_all()


def cut(port: int, key: str, body: bytes, client: Client) -> None:
    """Send the headers and a third of the body, then reset the connection."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = (f"POST /api/v1/manifests HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    sock.sendall(head + body[: len(body) // 3])
    time.sleep(0.05)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    client.count("cut connections")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifests", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--port", type=int, default=8140, help="gunicorn")
    parser.add_argument("--redis-port", type=int, default=8141, help="this bench's own redis-server")
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()

    db = f"ctxview_storm_{args.port}"
    logs = Path(f"/tmp/ctxview-storm-{args.port}")
    logs.mkdir(exist_ok=True)
    for old in logs.glob("*.log"):
        old.unlink()
    env = dict(os.environ, DATABASE_URL=f"{PG}/{db}", SECRET_KEY="bench-storm", DEBUG="0",
               ALLOWED_HOSTS="127.0.0.1", REDIS_URL=f"redis://127.0.0.1:{args.redis_port}/0",
               CTXVIEW_SWEEP_INTERVAL="5", CTXVIEW_SWEEP_MIN_AGE="5", CELERY_VISIBILITY_TIMEOUT="30",
               PYTHONUNBUFFERED="1")
    env.pop("CTXVIEW_CELERY_KEY_PREFIX", None)

    import psycopg

    create_database(db, env)
    key = create_key(env, "storm")

    rng = random.Random(args.seed)
    runs = max(1, args.manifests // 10)
    docs = [manifest(n, runs, rng) for n in range(args.manifests)]
    rng.shuffle(docs)  # a run's calls end up in many batches, met in different orders
    batches = [json.dumps({"manifests": docs[i : i + args.batch]}).encode()
               for i in range(0, len(docs), args.batch)]
    sends: list[tuple[bytes, bool]] = []
    later: list[tuple[bytes, bool]] = []
    for body in batches:
        sends.append((body, rng.random() < 0.02))
        if rng.random() < 0.2:
            # A retry racing the original (taken by the next free thread at once), or later.
            (sends if rng.random() < 0.5 else later).append((body, False))
    sends += later

    services = Services(args, env, logs)
    tally: Counter[str] = Counter()
    lock = threading.Lock()
    work: queue.Queue[tuple[bytes, bool] | None] = queue.Queue()
    for item in sends:
        work.put(item)
    for _ in range(args.threads):
        work.put(None)
    done = [0]

    def client_thread() -> None:
        client = Client([args.port], key, tally, lock)
        while (item := work.get()) is not None:
            body, cut_first = item
            if cut_first:
                cut(args.port, key, body, client)
            client.send(body)
            with lock:
                done[0] += 1

    def chaos() -> None:
        total = len(sends)
        while done[0] < total // 4:
            time.sleep(0.1)
        Services.kill(services.worker)
        tally["worker kills"] += 1
        time.sleep(2)
        services.start_worker()
        while done[0] < total // 2:
            time.sleep(0.1)
        Services.kill(services.redis)
        tally["redis outages (10 s)"] += 1
        time.sleep(10)
        services.start_redis()

    try:
        services.start_redis()
        services.start_worker()
        services.start_server()
        started = time.monotonic()
        threads = [threading.Thread(target=client_thread) for _ in range(args.threads)]
        chaos_thread = threading.Thread(target=chaos, daemon=True)
        for t in [*threads, chaos_thread]:
            t.start()
        for t in threads:
            t.join()
        storm_seconds = time.monotonic() - started
        chaos_thread.join(timeout=30)

        drain_started = time.monotonic()
        with psycopg.connect(f"{PG}/{db}", autocommit=True) as conn:
            backlog_at_end = conn.execute("SELECT count(*) FROM manifests_call WHERE analyzed_at IS NULL").fetchone()[0]
            analysed_seconds = None
            while time.monotonic() - drain_started < 900:
                left = conn.execute("SELECT count(*) FROM manifests_call WHERE analyzed_at IS NULL "
                                    "AND quarantined_at IS NULL").fetchone()[0]
                if not left and analysed_seconds is None:
                    analysed_seconds = time.monotonic() - drain_started
                # Drained: every call analysed and in the rollups (no dirty bucket left).
                if not left and not dirty_buckets(conn):
                    break
                time.sleep(0.5)
            drain_seconds = time.monotonic() - drain_started
            figures = check(conn, [d["call_id"] for d in docs])
    finally:
        services.stop_all()

    disconnects = figures.pop("client disconnects counted")
    print(f"machine: {os.cpu_count()} cores; {args.manifests} manifests in {len(batches)} batches of {args.batch}, "
          f"{len(sends) - len(batches)} re-sent, {args.threads} client threads; gunicorn x3, Celery prefork x2")
    print(f"storm: {storm_seconds:.1f} s ({args.manifests / storm_seconds:,.0f} manifests/s stored)")
    for name in ("worker kills", "redis outages (10 s)", "cut connections", "connection errors (retried)",
                 "503 (retried after Retry-After)"):
        print(f"  {name:<32} {tally[name]}")
    print(f"  {'client disconnects counted':<32} {disconnects}")
    print(f"accepted                           {tally['accepted']}")
    print(f"duplicate                          {tally['duplicate']}")
    print(f"rejected                           {tally['rejected']}")
    print(f"5xx                                {tally['5xx']}")
    print(f"gave up                            {tally['gave up']}")
    double = figures.pop("double-counted") + max(0, tally["accepted"] - args.manifests)
    print(f"lost                               {figures.pop('lost')}")
    print(f"double-counted                     {double}")
    print(f"wrong run times                    {figures.pop('wrong run times')} of {figures.pop('runs')} runs")
    print(f"unanalysed after the drain         {figures.pop('unanalysed')} (quarantined {figures.pop('quarantined')})")
    print(f"drain time                         {drain_seconds:.1f} s for a backlog of {backlog_at_end} calls "
          f"at the end of the storm (all analysed after {analysed_seconds or 0:.1f} s)")


def dirty_buckets(conn) -> int:
    """Rollup marks not refreshed yet (0 on a schema without rollup marks)."""
    if conn.execute("SELECT to_regclass('manifests_rollupmark')").fetchone()[0] is None:
        return 0
    return conn.execute("SELECT count(*) FROM manifests_rollupmark").fetchone()[0]


def check(conn, call_ids: list[str]) -> dict[str, int]:
    one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    stored = one("SELECT count(DISTINCT call_id) FROM manifests_call")
    analysed = one("SELECT count(*) FROM manifests_call WHERE analyzed_at IS NOT NULL")
    double = max(0, one("SELECT count(*) FROM manifests_call") - stored)
    double += max(0, one("SELECT count(*) FROM manifests_callfigures") - analysed)
    double += abs(one("SELECT coalesce(sum(calls), 0) FROM manifests_rollup WHERE bucket = 'day'") - analysed)
    double += abs(one("SELECT coalesce(sum(calls), 0) FROM manifests_prefixentry")
                  - one("SELECT count(*) FROM manifests_call WHERE analyzed_at IS NOT NULL AND prefix_hash <> ''"))
    wrong = one("""SELECT count(*) FROM manifests_run r JOIN (SELECT run_id, min(started_at) AS f, max(started_at) AS l
                   FROM manifests_call GROUP BY run_id) c ON c.run_id = r.id
                   WHERE r.first_seen <> c.f OR r.last_seen <> c.l""")
    return {
        "lost": len(set(call_ids)) - stored,
        "double-counted": double,
        "wrong run times": wrong,
        "runs": one("SELECT count(*) FROM manifests_run"),
        "unanalysed": one("SELECT count(*) FROM manifests_call WHERE analyzed_at IS NULL"),
        "quarantined": one("SELECT count(*) FROM manifests_call WHERE quarantined_at IS NOT NULL"),
        "client disconnects counted": one("SELECT coalesce(sum(value), 0) FROM manifests_opscounter "
                                          "WHERE name = 'client_disconnects'"),
    }


if __name__ == "__main__":
    main()
