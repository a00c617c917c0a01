"""Dashboard page benchmark: server time of the call view (200 items) and of the overview
over a large items table, measured in-process with Django's test client.

    .venv/bin/python bench/pages.py [--calls 5000] [--items-per-call 200] [--repeat 25]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ctxview .venv/bin/python bench/pages.py --calls 50000

The data goes through the real ingest path (``ingest.ingest_body``) and the real analysis
(run in-process, as with the embedded default), into a scratch database: ``<name>_bench_pages``
on PostgreSQL (dropped and created), a temporary file on SQLite. Nothing of an existing
database is touched. ``--keep`` reuses the scratch database of a previous run as it is
(skip the load, measure again).

Prints, per page: median and p95 server time over ``--repeat`` requests, the number of SQL
queries, and the ratio against a baseline measured in the same run: the login page (a
template render with no query). Targets (issue 5): call view < 150 ms, overview < 300 ms.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KINDS = ["system", "tools", "task", "memory", "history", "retrieval", "tool_result", "summary", "example", "state"]
ACTIONS = ["keep", "keep", "keep", "compress", "summarize", "truncate", "extract", "drop", "dedupe", "ref"]
AGENTS = ["researcher", "coder", "refund-analyst", "planner"]
MODELS = ["claude-sonnet-4-5", "gpt-5-mini"]


def scratch_database(keep: bool) -> str:
    """Point Django at a scratch database before it is set up; return a description."""
    url = os.environ.get("DATABASE_URL", "")
    os.environ.pop("REDIS_URL", None)  # analysis runs in-process (Celery eager), as with the embedded default
    os.environ.setdefault("SECRET_KEY", "bench-only-secret")
    if url.startswith("postgres"):
        import psycopg

        base, _, name = url.rpartition("/")
        bench = f"{name.split('?')[0]}_bench_pages"
        if not keep:
            with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{bench}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{bench}"')
        os.environ["DATABASE_URL"] = f"{base}/{bench}"
        return f"PostgreSQL {bench}"
    path = Path(tempfile.gettempdir()) / "ctxview-bench-pages.sqlite3"
    if not keep:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.environ["CTXVIEW_SQLITE_PATH"] = str(path)
    return f"SQLite {path}"


def manifest(n: int, per_call: int, now: datetime, calls: int) -> dict[str, Any]:
    """One synthetic call: ``per_call`` items of every kind and action, evidence, usage."""
    run, step = divmod(n, 10)
    at = now - timedelta(days=7) + timedelta(seconds=n * (7 * 86400 / max(calls, 1)))
    agent, model = AGENTS[run % len(AGENTS)], MODELS[run % len(MODELS)]
    items = []
    position = 0
    for i in range(per_call):
        action = ACTIONS[i % len(ACTIONS)] if i >= 3 else "keep"
        absent = action in ("drop", "dedupe")
        requested = 40 + (i * 37 + n) % 400
        used = 0 if absent else (requested if action == "keep" else requested // 2)
        items.append({
            "id": f"item-{i}", "kind": KINDS[i % len(KINDS)], "action": action, "requested_tokens": requested,
            "granted_tokens": used, "used_tokens": used, "priority": (i * 7) % 100, "pinned": i < 3,
            "trust": "untrusted" if i % 10 == 6 else "trusted",
            "zone": None if absent else ("head" if i < 3 else "middle" if i < per_call - 10 else "tail"),
            "position": None if absent else position, "reason": f"{action}: item {i} got {used} tokens",
            "content_hash": f"{(n * 1000 + i):016x}", "source_ref": f"ref://{run}/{i}" if i % 5 == 0 else None,
        })
        position += 0 if absent else 1
    input_tokens = sum(i["used_tokens"] for i in items) + 20
    hit = step > 0 and (n // 500) % 7 != 3
    prefix_tokens = sum(i["used_tokens"] for i in items[:3])
    evidence = [{"key": f"ev-{k}", "label": f"evidence {k}", "expected_item": f"item-{k * 7 + 3}",
                 "present": (n + k) % 9 != 0} for k in range(5)]
    out: dict[str, Any] = {
        "schema": "ctxview.manifest/v1", "call_id": f"bench-{n}", "run_id": f"bench-run-{run}", "step": step,
        "agent": agent, "model": model, "started_at": at.isoformat(),
        "budget": {"window": 200_000, "output_reserve": 8000, "safety_margin": 1000},
        "prefix": {"hash": f"{(n // 500) % 7:064x}", "tokens": prefix_tokens,
                   "segments": [{"name": "system", "hash": f"{(n // 500) % 7:064x}", "tokens": prefix_tokens}]},
        "usage": {"input_tokens": input_tokens, "cache_read_tokens": prefix_tokens if hit else 0,
                  "cache_write_tokens": 0 if hit else prefix_tokens, "output_tokens": 300},
        "items": items, "evidence": evidence,
        "outcome": {"status": "ok", "verified": "yes" if n % 3 else "no"},
    }
    if n % 20 == 5:
        out["compactions"] = [{"id": f"cmp-{n}", "strategy": "summary", "tokens_before": 9000, "tokens_after": 2000,
                               "invariants": [{"name": "user_constraints", "ok": n % 40 != 5,
                                               "lost": [] if n % 40 != 5 else ["only the test environment"]}]}]
    return out


def load(project: Any, calls: int, per_call: int, batch: int) -> tuple[float, int]:
    import msgspec

    from manifests import ingest

    now = datetime.now(UTC)
    started = time.perf_counter()
    stored = 0
    for start in range(0, calls, batch):
        body = msgspec.json.encode({"manifests": [manifest(n, per_call, now, calls)
                                                  for n in range(start, min(calls, start + batch))]})
        report = ingest.ingest_body(project=project, body=body)
        stored += report.count(ingest.ACCEPTED)
        if (start // batch) % 20 == 0:
            done = min(calls, start + batch)
            print(f"  loaded {done}/{calls} calls ({done * per_call:,} items), "
                  f"{time.perf_counter() - started:.0f}s", flush=True)
    return time.perf_counter() - started, stored


def measure(client: Any, url: str, repeat: int) -> tuple[float, float, int, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def get(url: str) -> Any:
        response = client.get(url)
        if response.streaming:  # an export: the time includes producing every row
            b"".join(response.streaming_content)
        return response

    for _ in range(2):  # warm-up: connection, template and plan caches
        get(url)
    times = []
    with CaptureQueriesContext(connection) as ctx:
        response = get(url)
    queries = len(ctx.captured_queries)
    for _ in range(repeat):
        t = time.perf_counter()
        response = get(url)
        times.append(time.perf_counter() - t)
    times.sort()
    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
    return statistics.median(times) * 1000, p95 * 1000, queries, response.status_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000, help="calls to load (items = calls x items-per-call)")
    parser.add_argument("--items-per-call", type=int, default=200)
    parser.add_argument("--batch", type=int, default=50, help="manifests per ingest batch")
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--keep", action="store_true", help="reuse the scratch database of a previous run")
    args = parser.parse_args()

    where = scratch_database(args.keep)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from django.test import Client

    from manifests import services
    from manifests.models import Call, Item, Project, Rollup

    settings.DEBUG = False
    if "testserver" not in settings.ALLOWED_HOSTS:
        settings.ALLOWED_HOSTS.append("testserver")
    print(f"database: {where}")
    call_command("migrate", verbosity=0)
    User = get_user_model()
    project = Project.objects.filter(slug="bench").first()
    if project is None:
        user = User.objects.create_user("bench", password="bench-password")
        project = services.create_project(name="Bench", owner=user)
    user = User.objects.get(username="bench")
    if not args.keep or not Call.objects.filter(project=project).exists():
        print(f"loading {args.calls} calls x {args.items_per_call} items through ingest + analysis ...")
        seconds, stored = load(project, args.calls, args.items_per_call, args.batch)
        print(f"loaded {stored} calls in {seconds:.0f}s ({stored * args.items_per_call / seconds:,.0f} items/s, "
              "analysis included)")
    items = Item.objects.count()
    calls = Call.objects.count()
    rollups = Rollup.objects.count()
    print(f"tables: {calls:,} calls, {items:,} items, {rollups:,} roll-up rows")
    # Measure on a fresh database session: the load and the full-table counts above leave the
    # PostgreSQL backend slower for small indexed queries (2-3x, seen here), which no page
    # request would have caused.
    connections.close_all()

    client = Client()
    client.force_login(user)
    one = Call.objects.filter(project=project, item_count=args.items_per_call).order_by("-started_at").first()
    pages = [
        ("baseline: login page (no query)", "/accounts/login/"),
        (f"call view ({one.item_count} items)", f"/p/bench/calls/{one.call_id}/"),
        ("what-if replay JSON (same call)", f"/p/bench/whatif.json?call={one.call_id}&budget=100000&reserve=4000"),
        ("overview, last 24h", "/p/bench/?range=24h"),
        ("overview, last 7d", "/p/bench/?range=7d"),
        ("overview, all time", "/p/bench/?range=all"),
        ("runs list", "/p/bench/runs/?range=7d"),
        ("run view (10 calls)", f"/p/bench/runs/{one.run.run_id}/"),
        ("cache view, last 7d", "/p/bench/cache/?range=7d"),
        ("evidence triage, last 7d", "/p/bench/evidence/?range=7d"),
        ("compaction review, last 7d", "/p/bench/compactions/?range=7d"),
        ("calls list, last 7d", "/p/bench/calls/?range=7d"),
        ("calls list, last 7d, by hit rate", "/p/bench/calls/?range=7d&sort=-hit"),
        ("search: a call id (redirect)", f"/p/bench/search/?q={one.call_id}"),
        ("search: ambiguous prefix", "/p/bench/search/?q=bench-1"),
        ("compare with previous step", f"/p/bench/compare/?b={one.call_id}"),
        (f"export: items of a run, CSV ({10 * args.items_per_call} rows)",
         f"/p/bench/export/items.csv?range=all&run={one.run.run_id}"),
        ("export: calls of the last 24h, JSONL", "/p/bench/export/calls.jsonl?range=24h"),
    ]
    print(f"\n{'page':<40} {'median ms':>10} {'p95 ms':>9} {'queries':>8} {'x baseline':>11}")
    base = None
    for name, url in pages:
        median, p95, queries, status = measure(client, url, args.repeat)
        if status not in (200, 302):
            print(f"{name:<40} HTTP {status}")
            continue
        base = base or median
        print(f"{name:<40} {median:>10.1f} {p95:>9.1f} {queries:>8} {median / base:>10.1f}x")
    print(f"\n({args.repeat} requests per page after 2 warm-ups; Django test client, in-process: server time "
          "including template rendering, no network)")


if __name__ == "__main__":
    main()
