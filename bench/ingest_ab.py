"""Two checkouts' ingest, batch by batch: which code stores a batch faster, on this machine now.

    .venv/bin/python bench/ingest_ab.py /path/to/checkout-A /path/to/checkout-B [--batches 40]

Starts one gunicorn server (2 workers) per checkout, each on its own fresh scratch database
(``<name>_bench_ab_a`` / ``_b`` for DATABASE_URL=.../<name>), and posts the same batches of
``bench/ingest.py``'s manifests (100 x 40 items) to both in turn, flipping the order every batch:
a drift of the machine's load reaches both sides alike, which whole bench runs minutes apart do
not. Prints, per side, the wall time per batch (median, min, mean), the CPU time of its server's
processes and of its PostgreSQL backends per batch. Each checkout needs its own ``.venv`` (a
symlink to the shared one will do). Not a test: compare the two lines of one run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.ingest import free_port, manifest  # noqa: E402
from bench.support import PG, backend_cpu_seconds, group_cpu_seconds, scratch_database_name, wait_port  # noqa: E402


def start(root: Path, db: str, redis: str) -> tuple[subprocess.Popen, int, str]:
    """Create and migrate ``db`` with ``root``'s code, make a key, start its gunicorn."""
    import psycopg

    env = dict(os.environ, DATABASE_URL=f"{PG}/{db}", SECRET_KEY="bench", DEBUG="0", ALLOWED_HOSTS="127.0.0.1")
    env["REDIS_URL"] = redis
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {db}")
    python = str(root / ".venv/bin/python")
    subprocess.run([python, "manage.py", "migrate", "-v0"], cwd=root, env=env, check=True)
    code = (
        "from manifests import services; p = services.create_project(name='bench'); "
        "print(services.create_api_key(project=p, can_ingest=True, can_read=True)[1])"
    )
    out = subprocess.run([python, "manage.py", "shell", "-c", code], cwd=root, env=env, check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen(
        [str(root / ".venv/bin/gunicorn"), "ctxview.wsgi", "-b", f"127.0.0.1:{port}", "-w", "2"]
        + ["--log-level", "warning"],
        cwd=root,
        env=env,
        start_new_session=True,  # its own process group: its CPU is summed by group
        stderr=subprocess.DEVNULL,
    )
    wait_port(port)
    return server, port, out.stdout.decode().strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    import psycopg

    redis = os.environ.get("BENCH_REDIS") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/14"
    sides: dict[str, dict] = {}
    try:
        for name, root in (("A", args.a), ("B", args.b)):
            db = scratch_database_name(f"ab_{name.lower()}", f"ctxview_bench_ab_{name.lower()}")
            server, port, key = start(root.resolve(), db, redis)
            sides[name] = dict(
                root=root,
                server=server,
                key=key,
                conn=http.client.HTTPConnection("127.0.0.1", port, timeout=120),
                monitor=psycopg.connect(f"{PG}/{db}", autocommit=True),
                wall=[],
                cpu=[],
                backend=[],
            )
        total = (args.batches + 2) * 100
        docs = [manifest(n, 40) for n in range(total)]
        bodies = [json.dumps({"manifests": docs[i : i + 100]}).encode() for i in range(0, total, 100)]

        def post(side: dict, body: bytes) -> tuple[float, float, float]:
            cpu, backend = group_cpu_seconds(side["server"].pid), backend_cpu_seconds(side["monitor"])
            start_time = time.perf_counter()
            headers = {"Authorization": f"Bearer {side['key']}", "Content-Type": "application/json"}
            side["conn"].request("POST", "/api/v1/manifests", body, headers)
            response = side["conn"].getresponse()
            payload = response.read()
            wall = time.perf_counter() - start_time
            if response.status != 200:
                raise SystemExit(f"ingest failed: {response.status} {payload[:300]!r}")
            time.sleep(0.02)  # the analysis task is published after the response
            cpu = group_cpu_seconds(side["server"].pid) - cpu
            return wall, cpu, backend_cpu_seconds(side["monitor"]) - backend

        for index, body in enumerate(bodies):
            for name in "AB" if index % 2 == 0 else "BA":
                wall, cpu, backend = post(sides[name], body)
                if index >= 2:  # the first two batches warm both servers up
                    for field, value in (("wall", wall), ("cpu", cpu), ("backend", backend)):
                        sides[name][field].append(value)
        print(f"{args.batches} batches of 100 manifests x 40 items each; load average {os.getloadavg()[0]:.1f}")
        for name, side in sides.items():
            n = len(side["wall"])
            print(
                f"{name} {side['root']}: wall per batch median {statistics.median(side['wall']) * 1000:.1f} ms "
                f"(min {min(side['wall']) * 1000:.1f}, mean {statistics.mean(side['wall']) * 1000:.1f}); "
                f"server CPU {sum(side['cpu']) / n * 1000:.1f} ms, backend CPU {sum(side['backend']) / n * 1000:.1f} ms"
            )
    finally:
        for side in sides.values():
            os.killpg(side["server"].pid, signal.SIGTERM)
            side["server"].wait(timeout=20)
        subprocess.run(["redis-cli", "-u", redis, "flushdb"], capture_output=True)


if __name__ == "__main__":
    main()
