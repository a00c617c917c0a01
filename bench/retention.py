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


def load(name: str, items: int) -> object:
    from django.db import connection

    from manifests import services
    from manifests.ingest import ingest_body
    from manifests.models import Item
    from tests.conftest import make_manifest

    project = services.create_project(name=name)
    per_call = 50
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for batch in range(CALLS // 100):
        manifests = []
        for n in range(100):
            m = make_manifest(f"{name}-{batch}-{n}", run_id=f"{name}-run-{batch}", step=n, items=per_call)
            m["started_at"] = (start + timedelta(minutes=batch * 100 + n)).isoformat()
            manifests.append(m)
        ingest_body(project=project, body=json.dumps({"manifests": manifests}).encode())
    columns = [f.column for f in Item._meta.concrete_fields if f.column != "id"]
    cols = ", ".join(connection.ops.quote_name(c) for c in columns)
    table = connection.ops.quote_name(Item._meta.db_table)
    while (have := Item.objects.filter(project=project).count()) < items:
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {table} WHERE project_id = %s LIMIT %s",
                [project.pk, items - have],
            )
    return project


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=1_000_000)
    args = parser.parse_args()
    where = scratch_database()
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
    django.setup()
    from django.core.management import call_command

    from manifests import retention
    from manifests.models import Item

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


if __name__ == "__main__":
    main()
