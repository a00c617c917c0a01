"""Ingest benchmark: the real HTTP API against PostgreSQL COPY, in the same run.

    .venv/bin/python bench/ingest.py [--manifests 2000] [--items 40] [--batch 100]

1. Starts a real server process (gunicorn, 2 workers) on a scratch PostgreSQL
   database, posts N manifests of about 40 items in batches through
   ``POST /api/v1/manifests`` and reports manifests/s, items/s and the server's
   peak memory.
2. Loads the same item rows with ``COPY`` into the same table (the physical
   baseline) and prints the ratio API/COPY; with ``--bracket`` also just before the
   API's run, against the geometric mean of the two COPY timings.
3. Separately, validation cost: decoding + validating the same bytes with the
   shared msgspec types, and with DRF-free json + msgspec.convert, as a ratio
   to ``orjson.loads`` of the same bytes.

Not a test: figures vary with the machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.support import PG, create_database, create_key, scratch_name  # noqa: E402

# ctxview_bench, or <name>_bench for DATABASE_URL=.../<name>: concurrent runs do not collide.
DB = scratch_name("ctxview_bench")
T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
KINDS = ["system", "tools", "task", "history", "tool_result", "retrieval", "memory", "summary"]
ACTIONS = ["keep", "keep", "keep", "summarize", "truncate", "drop", "extract", "ref"]


def manifest(n: int, items: int) -> dict:
    return {
        "schema": "ctxview.manifest/v1",
        "call_id": f"bench-{n}",
        "run_id": f"bench-run-{n // 20}",
        "step": n % 20,
        "agent": "bench",
        "model": "claude-sonnet-4-5",
        "provider": "anthropic",
        "started_at": (T0 + timedelta(seconds=n)).isoformat(),
        "budget": {"window": 128000, "output_reserve": 4000, "safety_margin": 1000},
        "prefix": {
            "hash": f"{n % 7:064x}",
            "tokens": 2000,
            "segments": [{"name": "system", "hash": "a" * 64, "tokens": 800}],
        },
        "usage": {"input_tokens": 20000, "cache_read_tokens": 2000, "output_tokens": 500},
        "items": [
            {
                "id": f"item-{i}",
                "kind": KINDS[i % 8],
                "action": ACTIONS[i % 8],
                "requested_tokens": 300 + i,
                "granted_tokens": 250 + i,
                "used_tokens": 240 + i,
                "priority": i % 100,
                "zone": ["head", "middle", "tail"][i % 3],
                "position": i,
                "reason": f"granted {250 + i} of {300 + i} tokens by priority weight",
                "source_ref": f"docs/file-{i}.md:1-40",
                "content_hash": f"{(n * 1000 + i):064x}",
                "trust": "untrusted" if i % 8 == 4 else "trusted",
            }
            for i in range(items)
        ],
        "evidence": [{"key": f"ev-{k}", "label": "429", "present": k % 2 == 0} for k in range(3)],
        "outcome": {"status": "ok", "verified": "yes"},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss_kib(pid: int) -> int:
    """Peak resident memory of a process and its children (gunicorn workers)."""
    total = 0
    pids = [pid] + [
        int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    ]
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def post_all(port: int, key: str, bodies: list[bytes]) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    start = time.perf_counter()
    for body in bodies:
        conn.request(
            "POST", "/api/v1/manifests", body, {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        )
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise SystemExit(f"ingest failed: {response.status} {payload[:300]!r}")
    return time.perf_counter() - start


def max_call_pk() -> int:
    import psycopg

    with psycopg.connect(f"{PG}/{DB}") as conn:
        return conn.execute("SELECT coalesce(max(id), 0) FROM manifests_call").fetchone()[0]


def copy_baseline(rows: list[tuple], after_pk: int = 0, call_ids: list[int] | None = None) -> float:
    """COPY the same item rows into the same table (emptied first), and time it. The rows
    belong to the calls the API stored in this round (primary key above ``after_pk``), or to
    ``call_ids`` when given (the COPY before the API's run: the item table has no foreign key
    to the calls, so the ids are only values)."""
    import psycopg

    from manifests.ingest.rows import ITEM_COLUMNS

    columns = ", ".join(f'"{c}"' for c in ITEM_COLUMNS)
    with psycopg.connect(f"{PG}/{DB}") as conn:
        if call_ids is None:
            call_ids = [
                r[0]
                for r in conn.execute("SELECT id FROM manifests_call WHERE id > %s ORDER BY id", [after_pk]).fetchall()
            ]
        project_id = conn.execute("SELECT id FROM manifests_project LIMIT 1").fetchone()[0]
        conn.execute("TRUNCATE manifests_item")
        conn.commit()
        start = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY manifests_item ({columns}) FROM STDIN") as copy:
            per_call = len(rows) // len(call_ids)
            for index, row in enumerate(rows):
                copy.write_row((call_ids[index // per_call], project_id, *row[2:]))
        conn.commit()
        return time.perf_counter() - start


def validation_ratios(items: int, samples: int = 300, rounds: int = 5) -> dict[str, float]:
    import msgspec
    import orjson

    from ctxkit.manifest import decode_manifest, semantic_errors

    body = orjson.dumps(manifest(0, 100))  # the yardstick: a 100-item manifest

    def timeit(fn) -> float:
        # The best of many short samples: on a shared machine a long sample is rarely quiet.
        best = float("inf")
        for _ in range(samples):
            start = time.perf_counter()
            for _ in range(rounds):
                fn()
            best = min(best, time.perf_counter() - start)
        return best

    base = timeit(lambda: orjson.loads(body))
    typed = timeit(lambda: semantic_errors(decode_manifest(body)))

    def ingest_path() -> None:
        # What ingest does per manifest: decode + validate, canonical re-encode, hash.
        m = decode_manifest(body)
        semantic_errors(m)
        hashlib.sha256(msgspec.json.encode(m)).hexdigest()

    full = timeit(ingest_path)
    ratios = {"decode + validate": typed / base, "+ canonical encode + sha256": full / base}
    try:
        from manifests.ingest import decode
    except Exception:  # Django not set up (the pre-door baseline): schema figures only
        return ratios
    # The whole door of ingest.py, per manifest: NUL rule, decode + validate, bounds,
    # canonical encode, duplicate-key check, SHA-256. ctxkit sends the canonical bytes
    # (duplicates ruled out for free); any other client's bytes are parsed once more.
    canonical = msgspec.json.encode(decode_manifest(body))
    ratios["ingest door, ctxkit's bytes"] = timeit(lambda: hashlib.sha256(decode(canonical)[3]).hexdigest()) / base
    ratios["ingest door, other bytes"] = timeit(lambda: hashlib.sha256(decode(body)[3]).hexdigest()) / base
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifests", type=int, default=2000)
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="API run then COPY run, this many times in turn (new call ids each round): on a shared "
        "machine the load changes within seconds, so each ratio pairs runs made close together",
    )
    parser.add_argument(
        "--bracket",
        action="store_true",
        help="time the COPY just before and just after each API run too, against their geometric mean",
    )
    parser.add_argument("--validation-only", action="store_true", help="only the validation ratios (no server)")
    args = parser.parse_args()
    if args.validation_only:
        import django

        os.environ.setdefault("SECRET_KEY", "bench")
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
        django.setup()
        import gc

        gc.collect()
        gc.freeze()  # Django's objects out of the collector's way, as in the pre-Django baseline
        for name, ratio in validation_ratios(args.items).items():
            print(f"validation, 100-item manifest, {name:<28} {ratio:.2f}x orjson.loads")
        return

    env = dict(os.environ, DATABASE_URL=f"{PG}/{DB}", SECRET_KEY="bench", DEBUG="0", ALLOWED_HOSTS="127.0.0.1")
    # As in production: analysis is handed to Redis (one task per batch), not run
    # inside the request. No worker consumes this scratch queue; it is flushed after.
    env["REDIS_URL"] = os.environ.get("BENCH_REDIS") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/14"
    create_database(DB, env)
    key = create_key(env, "bench")

    def round_bodies(r: int) -> tuple[list[dict], list[bytes]]:
        docs = [manifest(r * args.manifests + n, args.items) for n in range(args.manifests)]
        batches = range(0, len(docs), args.batch)
        return docs, [json.dumps({"manifests": docs[i : i + args.batch]}).encode() for i in batches]

    port = free_port()
    server = subprocess.Popen(
        [
            str(ROOT / ".venv/bin/gunicorn"),
            "ctxview.wsgi",
            "-b",
            f"127.0.0.1:{port}",
            "-w",
            str(args.workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        import django

        os.environ.update(env)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
        django.setup()
        from ctxkit.manifest import decode_manifest
        from manifests.ingest.rows import item_rows

        print(
            f"machine: {os.cpu_count()} cores; {args.manifests} manifests x {args.items} items in batches of "
            f"{args.batch}; load average {os.getloadavg()[0]:.1f}"
        )
        from manifests.storage import partitions

        # The days' partitions, before the first COPY (otherwise the API's first batch makes them).
        partitions.ensure_days(
            {partitions.day_of(T0 + timedelta(seconds=n)) for n in range(args.rounds * args.manifests)}
        )
        ratios = []
        for r in range(args.rounds):
            docs, bodies = round_bodies(r)
            decoded = [decode_manifest(json.dumps(d).encode()) for d in docs]
            rows = item_rows(0, decoded, list(range(len(decoded))))
            before = max_call_pk()
            # With --bracket the baseline is timed just before and just after the API's run
            # (geometric mean): on this shared machine the load drifts within seconds, and the
            # bracket cancels a drift across the round instead of charging it to one side.
            copy_first = None
            if args.bracket:
                copy_first = copy_baseline(rows, call_ids=list(range(before + 1, before + 1 + len(docs))))
            api_seconds = post_all(port, key, bodies)
            copy_after = copy_baseline(rows, before)
            copy_seconds = (copy_first * copy_after) ** 0.5 if copy_first else copy_after
            n_items = len(rows)
            api_items = n_items / api_seconds
            copy_items = n_items / copy_seconds
            ratios.append(api_items / copy_items)
            print(
                f"API (gunicorn x{args.workers}, PostgreSQL): "
                f"{args.manifests / api_seconds:,.0f} manifests/s, {api_items:,.0f} items/s"
            )
            bracket = f" (before {n_items / copy_first:,.0f}, after {n_items / copy_after:,.0f})" if copy_first else ""
            print(f"COPY of the same item rows:          {copy_items:,.0f} items/s{bracket}")
            load = os.getloadavg()[0]
            print(f"ratio API/COPY (items/s):             {api_items / copy_items:.3f}x  (load average {load:.1f})")
        peak = peak_rss_kib(server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)
        subprocess.run(["redis-cli", "-u", env["REDIS_URL"], "flushdb"], capture_output=True)

    if len(ratios) > 1:
        print(
            f"ratio API/COPY, median of {len(ratios)} rounds: {sorted(ratios)[len(ratios) // 2]:.3f}x "
            f"(rounds {min(ratios):.3f}-{max(ratios):.3f})"
        )
    print(f"server peak memory (all processes):  {peak / 1024:.0f} MiB")
    for name, ratio in validation_ratios(args.items).items():
        print(f"validation, 100-item manifest, {name:<28} {ratio:.2f}x orjson.loads")
    print("targets: API/COPY >= 0.5x; decode + validate <= 1.0x orjson.loads")


if __name__ == "__main__":
    main()
