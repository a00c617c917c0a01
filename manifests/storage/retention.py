"""Retention and project deletion: set-based deletes, never row by row.

Raw rows (calls and everything hanging off them) expire after the project's retention
period; rollups keep their own, longer one, so trends outlive the calls behind them.

Django's ``QuerySet.delete()`` would load every call (raw manifest included) to cascade
by hand; here each table is cleared with one ``DELETE ... WHERE <fk> IN (subquery)``
statement, children first. The tables are found from the models' own relations
(``_meta.get_fields``), so a table added later is deleted too, without a list to
keep up to date (tests/storage/test_retention.py checks that nothing is left behind).

On PostgreSQL the raw tables are partitioned by day (manifests/storage/partitions.py): a day older
than every project's retention is expired by dropping its partitions (a catalog operation,
whatever the row count) after the plain tables that point into it are cleared; what is
left (projects with a longer retention than others, the rest of a day) is deleted by rows.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import ForeignObjectRel
from django.utils import timezone

from manifests.models import Call, PrefixEntry, Project, Rollup, Run
from manifests.storage import partitions

logger = logging.getLogger(__name__)

# Calls expired per transaction: bounds lock time and the size of one statement's work.
RETENTION_BATCH = 2000

# Copies of a call's run on rows that belong to the call (on_delete=DO_NOTHING, no index): such a
# row goes with its call, so deleting runs never looks them up.
RUN_COPIES = {("CacheEvent", "run"), ("Attribution", "run"), ("ReRead", "run")}


def _qn(name: str) -> str:
    return connection.ops.quote_name(name)


def _partitioned(model: type[models.Model]) -> bool:
    return model._meta.db_table in partitions.PARTITIONED_TABLES


def _delete_where(
    cursor: Any,
    model: type[models.Model],
    where: str,
    params: list[Any],
    *,
    before: datetime | None = None,
    keep_partitioned: bool = False,
) -> int:
    """Delete the rows of ``model`` that ``where`` selects, after everything that points at
    them: CASCADE relations are deleted (recursively), SET_NULL ones cleared.

    ``before``: every selected row of a time-partitioned table is older than this (the
    rows of expired calls), so their statements say so and PostgreSQL skips the newer
    partitions. ``keep_partitioned``: leave the rows of the partitioned tables themselves
    (their partitions are about to be dropped) and clear only what points into them."""
    table = _qn(model._meta.db_table)
    selected = f"SELECT {_qn(model._meta.pk.column)} FROM {table} WHERE {where}"
    # include_hidden: relations named "+" (Item.project, CacheEvent.previous_call, ...)
    # are left out of _meta.related_objects but hold foreign keys all the same.
    relations = [
        f for f in model._meta.get_fields(include_hidden=True)
        if isinstance(f, ForeignObjectRel) and f.auto_created and not f.concrete
    ]
    for rel in relations:
        child = rel.related_model
        assert isinstance(child, type), child  # a model class: the reverse side of a foreign key
        column = _qn(rel.field.column)
        if rel.on_delete is models.SET_NULL:
            cursor.execute(
                f"UPDATE {_qn(child._meta.db_table)} SET {column} = NULL WHERE {column} IN ({selected})", params
            )
        elif rel.on_delete is models.CASCADE:
            child_where, child_params = f"{column} IN ({selected})", params
            if before is not None and _partitioned(child):
                child_where, child_params = f"{child_where} AND {_qn(partitions.PARTITION_COLUMN)} < %s", [
                    *params,
                    before,
                ]
            _delete_where(
                cursor, child, child_where, child_params, before=before, keep_partitioned=keep_partitioned
            )
        elif (child.__name__, rel.field.name) in RUN_COPIES:
            continue  # deleted with the call it belongs to, through that call's relation
        else:
            # Every other relation here is CASCADE or SET_NULL (tests/storage/test_retention.py checks it).
            # A PROTECT or DO_NOTHING added later must decide its own rule: refuse rather than guess.
            raise ValueError(f"{child.__name__}.{rel.field.name}: on_delete={rel.on_delete.__name__} "
                             "has no set-based delete rule in manifests/storage/retention.py")
    if keep_partitioned and _partitioned(model):
        return 0
    cursor.execute(f"DELETE FROM {table} WHERE {where}", params)
    deleted: int = cursor.rowcount
    return deleted


def delete_project(*, project: Project) -> None:
    """Delete a project and all its data in one transaction of set-based statements."""
    with transaction.atomic(), connection.cursor() as cursor:
        _delete_where(cursor, Project, f"{_qn('id')} = %s", [project.pk])
    logger.info("deleted project %s (%s)", project.slug, project.pk)


def retention_days(project: Project) -> int:
    return project.retention_days or settings.CTXVIEW_RETENTION_DAYS


def rollup_retention_days(project: Project) -> int:
    # Rollups never expire before the raw rows they summarise.
    return max(settings.CTXVIEW_ROLLUP_RETENTION_DAYS, retention_days(project))


def expire_project(*, project: Project, now: datetime | None = None) -> dict[str, int]:
    """Delete the project's calls older than its retention period (in batches), the runs
    and prefixes left without recent calls, and rollups older than their own period."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=retention_days(project))
    expired = {"calls": 0, "runs": 0, "prefixes": 0, "rollups": 0}
    while True:
        ids = list(
            Call.objects.filter(project=project, started_at__lt=cutoff)
            .order_by("pk")
            .values_list("pk", flat=True)[:RETENTION_BATCH]
        )
        if not ids:
            break
        marks = ", ".join(["%s"] * len(ids))
        with transaction.atomic(), connection.cursor() as cursor:
            expired["calls"] += _delete_where(cursor, Call, f"{_qn('id')} IN ({marks})", ids, before=cutoff)
    with transaction.atomic():
        empty_runs = Run.objects.filter(project=project, last_seen__lt=cutoff).exclude(
            pk__in=Call.objects.filter(project=project).values("run_id")
        )
        expired["runs"] = empty_runs.delete()[0]
        expired["prefixes"] = PrefixEntry.objects.filter(project=project, last_seen__lt=cutoff).delete()[0]
        rollup_cutoff = now - timedelta(days=rollup_retention_days(project))
        expired["rollups"] = Rollup.objects.filter(project=project, start__lt=rollup_cutoff).delete()[0]
    if any(expired.values()):
        logger.info("retention for project %s: expired %s", project.slug, expired)
    return expired


def partition_cutoff(now: datetime) -> datetime:
    """Days wholly before this are past every project's retention: their partitions go."""
    days = [retention_days(p) for p in Project.objects.only("retention_days")] or [settings.CTXVIEW_RETENTION_DAYS]
    return now - timedelta(days=max(days))


def drop_expired_partitions(*, now: datetime | None = None) -> dict[str, int]:
    """Drop the day partitions older than every project's retention (PostgreSQL), one day
    per transaction: first the rows of plain tables that belong to the day's calls (the
    analysis rows, the idempotency keys) are deleted and pointers into it cleared, with
    the same relation walk as a row delete; then the day's tables are dropped."""
    dropped = {"partitions": 0, "calls": 0}
    if not partitions.enabled():
        return dropped
    cutoff = partition_cutoff(now or timezone.now())
    for day in partitions.partition_days():
        lo = datetime(day.year, day.month, day.day, tzinfo=UTC)
        if lo + timedelta(days=1) > cutoff:
            break
        where = f"{_qn(partitions.PARTITION_COLUMN)} >= %s AND {_qn(partitions.PARTITION_COLUMN)} < %s"
        params = [lo, lo + timedelta(days=1)]
        with transaction.atomic(), connection.cursor() as cursor:
            # DROP takes an ACCESS EXCLUSIVE lock on the parent: wait a bounded time for the
            # readers ahead of it (and hold up the ones queued behind it no longer); the
            # task's retry, or tomorrow's run, takes the day then.
            cursor.execute("SET LOCAL lock_timeout = '30s'")
            partitions.lock(cursor)
            cursor.execute(f'SELECT count(*) FROM "{partitions.partition_name(Call._meta.db_table, day)}"')
            dropped["calls"] += cursor.fetchone()[0]
            _delete_where(cursor, Call, where, params, keep_partitioned=True)
            # Deferred foreign-key checks still pending on the day's rows (written in this
            # same transaction, as in tests) would forbid the DROP: run them now.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            partitions.drop_day(cursor, day)
        dropped["partitions"] += 1
    if dropped["partitions"]:
        logger.info("retention dropped %s", dropped)
    return dropped


def enforce_retention(*, now: datetime | None = None) -> dict[str, int]:
    """Apply every project's retention; what the daily beat task runs. Whole days go by
    partition where every project's retention allows it, the rest by rows per project."""
    dropped = drop_expired_partitions(now=now)
    totals = {"calls": dropped["calls"], "runs": 0, "prefixes": 0, "rollups": 0, "partitions": dropped["partitions"]}
    for project in Project.objects.order_by("pk"):
        for key, count in expire_project(project=project, now=now).items():
            totals[key] += count
    return totals
