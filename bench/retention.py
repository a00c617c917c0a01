"""Project deletion and retention benchmark: set-based deletes against Django's cascade.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/ctxview .venv/bin/python bench/retention.py [--items 1000000]

Into a scratch database (``<name>_bench_retention`` on PostgreSQL, dropped and created; a
temporary file on SQLite), loads two projects through the real ingest path and analysis:
``big`` with ``--items`` item rows (1,000 calls ingested, their item rows then multiplied
by SQL to reach the count, so the call and child tables stay realistic) and ``small`` with
a tenth of them. Then, in the same run:

1. deletes ``small`` with Django's own cascade (``Project.delete()``, the baseline);
2. deletes ``big`` with ``retention.delete_project`` (set-based statements);

and prints both times and the item rows deleted per second by each, with the ratio.

Then the expiry of a day (``--day-items`` item rows per day, default ``--items``): a
project ``expiry`` gets two old days of calls, A and B, with the same rows. Day A is
expired by rows (``retention.expire_project``, what every project gets when its day is
not past every project's retention); day B by dropping the day's partitions
(``retention.drop_expired_partitions``, PostgreSQL only). Both print seconds and the ratio.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CALLS = 1000


def scratch_database() -> str:
    url = os.environ.get("DATABASE_URL", "")
    os.environ.pop("REDIS_URL", None)  # analysis in-process, as with the embedded default
    os.environ.setdefault("SECRET_KEY", "bench-only-secret")
    if url.startswith("postgres"):
        import psycopg

        base, _, name = url.rpartition("/")
        bench = f"{name.split('?')[0]}_bench_retention"
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{bench}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{bench}"')
        os.environ["DATABASE_URL"] = f"{base}/{bench}"
        return f"PostgreSQL {bench}"
    path = Path(tempfile.gettempdir()) / "ctxview-bench-retention.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.environ["CTXVIEW_SQLITE_PATH"] = str(path)
    return f"SQLite {path}"


def load(name: str, items: int, start: datetime = datetime(2026, 11, 1, tzinfo=UTC)) -> object:
    from django.db import connection

    from manifests import services
    from manifests.ingest import ingest_body
    from manifests.models import Item, Project
    from tests.support import manifest

    project = Project.objects.filter(name=name).first() or services.create_project(name=name)
    per_call = 50
    for batch in range(CALLS // 100):
        manifests = []
        for n in range(100):
            m = manifest(f"{name}-{start:%m%d}-{batch}-{n}", run_id=f"{name}-run-{batch}", step=n, items=per_call,
                         started_at=start + timedelta(minutes=batch * 100 + n))
            manifests.append(m)
        ingest_body(project=project, body=json.dumps({"manifests": manifests}).encode())
    columns = [f.column for f in Item._meta.concrete_fields if f.column != "id"]
    cols = ", ".join(connection.ops.quote_name(c) for c in columns)
    table = connection.ops.quote_name(Item._meta.db_table)
    # The day's rows are copied within the day (same calls, same started_at): one partition.
    day = "started_at >= %s AND started_at < %s"
    bounds = [start, start + timedelta(days=1)]
    of_day = Item.objects.filter(project=project, started_at__gte=bounds[0], started_at__lt=bounds[1])
    while (have := of_day.count()) < items:
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {table} WHERE project_id = %s AND {day} LIMIT %s",
                [project.pk, *bounds, items - have],
            )
    return project


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--day-items", type=int, default=None, help="item rows per expired day (default: --items)")
    args = parser.parse_args()
    where = scratch_database()
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
    django.setup()
    from django.core.management import call_command

    from manifests.models import Item
    from manifests.storage import retention

    call_command("migrate", verbosity=0)
    t = time.perf_counter()
    big = load("big", args.items)
    small = load("small", max(args.items // 10, CALLS * 50))
    big_items = Item.objects.filter(project=big).count()
    small_items = Item.objects.filter(project=small).count()
    print(f"{where}: loaded {big_items:,} + {small_items:,} item rows in {time.perf_counter() - t:.0f} s")

    t = time.perf_counter()
    small.delete()
    cascade = time.perf_counter() - t
    t = time.perf_counter()
    retention.delete_project(project=big)
    set_based = time.perf_counter() - t
    assert not Item.objects.exists(), "rows were left behind"

    cascade_rate, set_rate = small_items / cascade, big_items / set_based
    print(f"Django cascade (Project.delete): {small_items:,} items in {cascade:.2f} s = {cascade_rate:,.0f} items/s")
    print(f"retention.delete_project:        {big_items:,} items in {set_based:.2f} s = {set_rate:,.0f} items/s")
    print(f"set-based / cascade: {set_rate / cascade_rate:.1f}x the item rows per second")
    expire_a_day(args.day_items or args.items)


def expire_a_day(items: int) -> None:
    from django.conf import settings

    from manifests.models import Item
    from manifests.storage import partitions, retention

    day_a, day_b = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 2, tzinfo=UTC)
    t = time.perf_counter()
    project = load("expiry", items, day_a)
    load("expiry", items, day_b)
    rows_a = Item.objects.filter(project=project, started_at__lt=day_b).count()
    rows_b = Item.objects.filter(project=project, started_at__gte=day_b).count()
    print(f"expiry: loaded {rows_a:,} + {rows_b:,} item rows on two days in {time.perf_counter() - t:.0f} s")
    keep = timedelta(days=settings.CTXVIEW_RETENTION_DAYS)

    t = time.perf_counter()
    expired = retention.expire_project(project=project, now=day_b + keep)  # day A only, by rows
    by_rows = time.perf_counter() - t
    assert expired["calls"] and not Item.objects.filter(started_at__lt=day_b).exists()
    print(f"expire a day by rows (expire_project):        {rows_a:,} items in {by_rows:.2f} s")
    if not partitions.enabled():
        print("expire a day by partition: PostgreSQL only (SQLite keeps plain tables)")
        return
    t = time.perf_counter()
    dropped = retention.drop_expired_partitions(now=day_b + timedelta(days=1) + keep)  # day B (and A's empty tables)
    by_partition = time.perf_counter() - t
    assert dropped["partitions"] >= 1 and not Item.objects.filter(started_at__lt=day_b + timedelta(days=1)).exists()
    print(f"expire a day by partition (drop_expired_partitions): {rows_b:,} items in {by_partition:.2f} s")
    print(f"by partition / by rows: {by_rows / by_partition:.0f}x faster for the same day's rows")


if __name__ == "__main__":
    main()
