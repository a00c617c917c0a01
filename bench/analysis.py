"""Analysis benchmark: Celery against in-process, and rollups against the raw table.

    .venv/bin/python bench/analysis.py [--batches 40] [--batch-size 50] [--items-per-call 40]
                                       [--rounds 3] [--items 10000000] [--repeat 5]
                                       [--skip-celery] [--skip-trend]
    .venv/bin/python bench/analysis.py --trend-db ctxview_bench_pages --trend-project bench

Needs PostgreSQL and Redis (BENCH_PG, BENCH_REDIS); works on a scratch database
(``<name>_bench_analysis`` for DATABASE_URL=.../<name>, else ``ctxview_bench_analysis``;
dropped and recreated) and a Redis key prefix of its own.

1. Throughput. Ingests ``batches`` batches of ``batch-size`` manifests, then
   analyses the same batches twice from the same starting state: by calling the
   task function in this process, batch after batch, and through Celery (one
   ``analyze_calls`` task per batch, as ingest enqueues them) with a real worker
   process (prefork, concurrency 1: the same one core of work). Prints items/s of
   each and the ratio Celery / in-process (target: at least 0.8).
2. Trend query. Generates ``--items`` item rows over 30 days by SQL (bench/scale_data.py,
   shared with bench/pages.py: runs, calls, items, evidence, the analysis rows and the
   rollups, all written by PostgreSQL itself; 10 million by default), checks a sample of
   the generated rollup buckets against manifests/analysis/rollups.py, then times the
   30-day daily trend from the rollups against the same aggregate on the raw tables,
   median of ``--repeat`` runs each, and prints the ratio (target: at most 0.02, and the
   rollup median under 20 ms). Prints the N it ran. ``--trend-db NAME`` measures a
   database generated before (e.g. ``bench/pages.py --items 100000000``) instead.

Not a test: figures vary with the machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/14")
from bench.support import scratch_database_name  # noqa: E402

DB = scratch_database_name("analysis", "ctxview_bench_analysis")
PREFIX = f"ctxview-bench-{uuid.uuid4().hex[:8]}:"
T0 = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)
KINDS = ["system", "tools", "task", "history", "tool_result", "retrieval", "memory", "summary"]
ACTIONS = ["keep", "keep", "keep", "summarize", "truncate", "drop", "extract", "ref"]


def env() -> dict[str, str]:
    return dict(os.environ, DATABASE_URL=f"{PG}/{DB}", REDIS_URL=REDIS, SECRET_KEY="bench", DEBUG="0",
                DJANGO_SETTINGS_MODULE="ctxview.settings", LOG_LEVEL="WARNING",
                CTXVIEW_CELERY_KEY_PREFIX=PREFIX)


def reset_database() -> None:
    import psycopg

    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0", "--skip-checks"], cwd=ROOT, env=env(), check=True)


def setup_django() -> None:
    os.environ.update(env())
    import django

    django.setup()


def manifest(n: int, items: int) -> dict:
    """A realistic call: runs of 10 steps, a prefix that changes now and then, evidence
    that is present, cut, dropped or never a candidate, and a compaction every 7th call."""
    step = n % 10
    return {
        "schema": "ctxview.manifest/v1",
        "call_id": f"bench-{n}",
        "run_id": f"bench-run-{n // 10}",
        "step": step,
        "agent": ("planner", "coder")[n % 2],
        "model": "claude-sonnet-4-5",
        "started_at": (T0 + timedelta(seconds=20 * n)).isoformat(),
        "budget": {"window": 128000, "output_reserve": 4000, "safety_margin": 1000},
        "prefix": {
            "hash": f"{(n // 30) % 5:064x}",
            "tokens": 2400,
            "segments": [{"name": "system", "hash": f"{(n // 30) % 5:064x}", "tokens": 900},
                         {"name": "tools", "hash": "b" * 64, "tokens": 1500}],
        },
        "usage": {"input_tokens": 20000, "cache_read_tokens": 2400 if step else 0,
                  "cache_write_tokens": 0 if step else 2400, "output_tokens": 500},
        "items": [
            {
                "id": f"item-{i}",
                "kind": KINDS[i % 8],
                "action": ACTIONS[i % 8],
                "requested_tokens": 300 + i,
                "granted_tokens": 250 + i,
                "used_tokens": 0 if ACTIONS[i % 8] == "drop" else 240 + i,
                "priority": i % 100,
                "zone": ["head", "middle", "tail"][i % 3],
                "position": i,
                "reason": f"granted {250 + i} of {300 + i} tokens by priority weight",
                "content_hash": f"{(n * 1000 + i % 37):064x}",
                "trust": "untrusted" if i % 8 == 4 else "trusted",
            }
            for i in range(items)
        ],
        "evidence": [
            {"key": "kept", "present": True, "expected_item": "item-0", "found_in": "item-0", "used": n % 3 != 0},
            {"key": "cut", "present": False, "expected_item": "item-4"},
            {"key": "dropped", "present": False, "expected_item": "item-5"},
            {"key": "never", "present": False},
        ],
        "compactions": [] if n % 7 else [{
            "id": f"cmp-{n}", "strategy": "summary", "tokens_before": 9000, "tokens_after": 2100,
            "summary_item": "item-3",
            "invariants": [{"name": "user_constraints", "ok": n % 14 != 0, "lost": [] if n % 14 else ["test env"]},
                           {"name": "required_evidence", "ok": True}],
        }],
        "outcome": {"status": "ok", "verified": ("yes", "no", "unknown")[n % 3]},
    }


# --------------------------------------------------------------------------- #
# 1. Celery against in-process


def ingest_batches(batches: int, size: int, items: int) -> list[list[int]]:
    import orjson

    from manifests import services
    from manifests.ingest import ingest_body

    project = services.create_project(name="bench")
    out = []
    for b in range(batches):
        body = orjson.dumps({"manifests": [manifest(b * size + k, items) for k in range(size)]})
        out.append(ingest_body(project=project, body=body).stored_call_ids)
    return out


def reset_analysis() -> None:
    from django.apps import apps

    from manifests.models import (
        Attribution,
        CacheEvent,
        Call,
        CallFigures,
        CompactionFigures,
        PrefixEntry,
        Regression,
        Rollup,
    )

    derived = [Attribution, CacheEvent, CallFigures, CompactionFigures, PrefixEntry, Regression, Rollup]
    derived += [m for m in apps.get_models() if m.__name__ == "RollupMark"]  # incremental rollups' marks
    for model in derived:
        model.objects.all().delete()
    Call.objects.update(analyzed_at=None)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")


def purge_queue() -> None:
    import redis

    client = redis.Redis.from_url(REDIS)
    keys = list(client.scan_iter(f"{PREFIX}*"))
    if keys:
        client.delete(*keys)


def refresh_rollups() -> None:
    """Bring the rollups up to date, as the beat's refresh does every interval (incremental
    rollups): timed with the analysis, so both sides end with the same, fresh rollups. A
    checkout without ``rollups.refresh`` recomputes them in the analysis: nothing to do."""
    from manifests.analysis import rollups

    refresh = getattr(rollups, "refresh", None)
    if refresh is not None:
        refresh()


def in_process(batches: list[list[int]]) -> float:
    from manifests import tasks

    start = time.perf_counter()
    for ids in batches:
        tasks.analyze_calls.run(ids)  # the task's own function, in this process
    refresh_rollups()
    return time.perf_counter() - start


class Worker:
    """A real worker process (prefork), started once and reused across rounds."""

    def __init__(self, concurrency: int) -> None:
        import redis

        from manifests import tasks

        self.log = open(Path(tempfile.gettempdir()) / f"celery-bench-{os.getpid()}-{concurrency}.log", "w")
        self.process = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "celery"), "-A", "ctxview", "worker", "--pool=prefork",
             f"--concurrency={concurrency}", "--loglevel=WARNING", "--without-gossip", "--without-mingle",
             "--without-heartbeat", "-n", f"bench-{uuid.uuid4().hex[:6]}@%h"],
            cwd=ROOT, env=env(), stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        # Wait until it consumes (a no-op task), so its start-up is never timed.
        tasks.analyze_calls.delay([])
        client = redis.Redis.from_url(REDIS)
        while client.llen(f"{PREFIX}celery"):
            time.sleep(0.05)
        time.sleep(1.0)

    def run(self, batches: list[list[int]]) -> float:
        from manifests import tasks
        from manifests.models import Call

        total = sum(len(b) for b in batches)
        start = time.perf_counter()
        for ids in batches:
            tasks.analyze_calls.delay(ids)
        # Poll gently: this process shares the two cores with the worker and the database.
        while Call.objects.filter(analyzed_at__isnull=False).count() < total:
            if self.process.poll() is not None:
                raise SystemExit(f"the worker died: see {self.log.name}")
            time.sleep(0.1)
        refresh_rollups()
        return time.perf_counter() - start

    def stop(self) -> None:
        os.killpg(self.process.pid, 9)
        self.process.wait()
        self.log.close()
        os.unlink(self.log.name)


def throughput(args: argparse.Namespace) -> None:
    batches = ingest_batches(args.batches, args.batch_size, args.items_per_call)
    purge_queue()  # ingest enqueued the batches; this run analyses them explicitly
    items = args.batches * args.batch_size * args.items_per_call
    results: dict[str, list[float]] = {"in-process": [], "celery x1": [], "celery x2": []}
    for concurrency in (1, 2):
        worker = Worker(concurrency)
        try:
            # Alternate the two ways, round after round, so a busy moment of the machine
            # weighs on both; medians are compared.
            for _ in range(args.rounds):
                if concurrency == 1:
                    reset_analysis()
                    results["in-process"].append(in_process(batches))
                reset_analysis()
                results[f"celery x{concurrency}"].append(worker.run(batches))
        finally:
            worker.stop()
    median = {name: statistics.median(times) for name, times in results.items()}
    print(f"\n1. analysis throughput: {args.batches} batches x {args.batch_size} calls x {args.items_per_call} items "
          f"= {items} items, median of {args.rounds} rounds")
    for name, seconds in median.items():
        calls = args.batches * args.batch_size
        print(f"   {name:<12} {seconds:7.2f} s  {items / seconds:10.0f} items/s  {calls / seconds:7.0f} calls/s")
    local = median["in-process"]
    print(f"   ratio Celery x1 / in-process: {local / median['celery x1']:.2f} (target >= 0.8); "
          f"x2: {local / median['celery x2']:.2f}")


# --------------------------------------------------------------------------- #
# 2. Rollups against the raw table


def generate(project_id: int, items: int, per_call: int) -> int:
    """Runs, calls, items, evidence, the analysis rows and the rollups over the 30 days from
    T0, written by PostgreSQL itself (bench/scale_data.py, shared with bench/pages.py)."""
    from django.db import connection

    from bench import scale_data

    with connection.cursor() as cursor:
        report = scale_data.generate(cursor, project_ids=[project_id], items=items, per_call=per_call, days=30,
                                     end=T0 + timedelta(days=30), log=lambda line: print(line, flush=True))
    print(scale_data.describe(report))
    return report.calls


def timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def trend_from_raw(project, *, start: datetime, end: datetime) -> list[dict]:
    """The baseline: the daily trend aggregated from the raw tables (calls, figures, items),
    with the server's one SQL definition of tokens in context (manifests/figures.py)."""
    from django.db.models import Count, Sum
    from django.db.models.functions import TruncDay

    from manifests import figures
    from manifests.models import Call, Item

    calls = Call.objects.filter(project=project, started_at__gte=start, started_at__lt=end, analyzed_at__isnull=False)
    points: dict = {}
    for row in (calls.annotate(t=TruncDay("started_at", tzinfo=UTC)).values("t")
                .annotate(calls=Count("pk"), input_tokens=Sum("input_tokens"), cost=Sum("figures__cost"))
                .order_by("t")):
        points[row["t"]] = {"calls": row["calls"], "input_tokens": row["input_tokens"] or 0, "tokens_by_kind": {}}
    for row in (Item.objects.filter(call__in=calls.values("pk"))
                .annotate(t=TruncDay("call__started_at", tzinfo=UTC)).values("t", "kind")
                .annotate(tokens=Sum(figures.context_tokens())).order_by()):
        if row["tokens"]:
            points[row["t"]]["tokens_by_kind"][row["kind"]] = row["tokens"]
    return [points[t] for t in sorted(points)]


def trend_from_rollups(project, *, start: datetime, end: datetime) -> list[dict]:
    """What the overview reads: the daily rollups through the selectors."""
    from manifests.selectors import series
    from manifests.selectors.filters import Filters

    data = series.series(project, Filters(since=start, until=end), maps=("tokens_by_kind",))
    return [{"calls": data.sums["calls"][n], "input_tokens": data.sums["input_tokens"][n],
             "tokens_by_kind": data.maps["tokens_by_kind"][n]} for n in range(len(data.starts))]


def trend_bench(args: argparse.Namespace) -> None:
    from bench import scale_data
    from manifests import services
    from manifests.models import Call, Item, Project

    if args.trend_project:  # a database generated before (e.g. by bench/pages.py --items): measure only
        project = Project.objects.get(slug=args.trend_project)
        generated = built = 0.0
        calls = Call.objects.filter(project=project).count()
        n = Item.objects.filter(project=project).count()
        last = Call.objects.filter(project=project).order_by("-started_at").values_list("started_at", flat=True)[0]
        # Whole days (the daily rollups' buckets): the 30 days up to the end of the last call's day.
        end = last.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
        window = {"start": end - timedelta(days=30), "end": end}
    else:
        project = services.create_project(name="trend")
        started = time.perf_counter()
        calls = generate(project.pk, args.items, args.items_per_trend_call)
        generated = time.perf_counter() - started
        n = Item.objects.filter(project=project).count()
        window = {"start": T0, "end": T0 + timedelta(days=30)}
    # The rollups were computed set-based by the generator; a sample of buckets is
    # recomputed with manifests/analysis/rollups.py and compared.
    started = time.perf_counter()
    problems = scale_data.verify_rollups(project.pk)
    built = time.perf_counter() - started
    figure_problems = scale_data.verify_figures(project.pk)
    fast, from_rollups = timed(lambda: trend_from_rollups(project, **window), args.repeat)
    slow, from_raw = timed(lambda: trend_from_raw(project, **window), max(1, args.repeat // 2 + 1))
    same = from_rollups == from_raw
    print(f"\n2. 30-day trend on N = {n:,} items of this project ({calls:,} calls; generated in {generated:.0f} s; "
          f"sample of rollup buckets equal to rollups.py: {not problems}, checked in {built:.0f} s)")
    print(f"   sample of calls' figures and cache events equal to ctxkit.figures and the analysis's classify(): "
          f"{not figure_problems}")
    for p in problems + figure_problems:
        print("   " + p)
    print(f"   rollups   median {fast * 1000:9.1f} ms")
    print(f"   raw table median {slow * 1000:9.1f} ms")
    print(f"   ratio rollups / raw: {fast / slow:.4f} (target <= 0.02; median under 20 ms: {fast < 0.02}); "
          f"same figures: {same}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--items-per-call", type=int, default=40)
    parser.add_argument("--items", type=int, default=10_000_000, help="item rows for the trend query")
    parser.add_argument("--items-per-trend-call", type=int, default=100, help="mean items per call")
    parser.add_argument("--trend-db", default="",
                        help="measure the trend on this existing database (generated before) instead")
    parser.add_argument("--trend-project", default="bench", help="the project measured with --trend-db")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each trend query")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each throughput measurement")
    parser.add_argument("--skip-celery", action="store_true")
    parser.add_argument("--skip-trend", action="store_true")
    args = parser.parse_args()
    if args.trend_db:
        global DB
        DB = args.trend_db
        args.skip_celery = True
    else:
        args.trend_project = ""
        reset_database()
    setup_django()
    try:
        if not args.skip_celery:
            throughput(args)
        if not args.skip_trend:
            trend_bench(args)
    finally:
        purge_queue()


if __name__ == "__main__":
    main()
