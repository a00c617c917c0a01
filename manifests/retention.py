"""Retention and project deletion: set-based deletes, never row by row.

Raw rows (calls and everything hanging off them) expire after the project's retention
period; rollups keep their own, longer one, so trends outlive the calls behind them.

Django's ``QuerySet.delete()`` would load every call (raw manifest included) to cascade
by hand; here each table is cleared with one ``DELETE ... WHERE <fk> IN (subquery)``
statement, children first. The tables are found from the models' own relations
(``_meta.get_fields``), so a table added later is deleted too, without a list to
keep up to date (tests/test_retention.py checks that nothing is left behind).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, models, transaction
from django.utils import timezone

from manifests.models import Call, PrefixEntry, Project, Rollup, Run

logger = logging.getLogger(__name__)

# Calls expired per transaction: bounds lock time and the size of one statement's work.
RETENTION_BATCH = 2000


def _qn(name: str) -> str:
    return connection.ops.quote_name(name)


def _delete_where(cursor: Any, model: type[models.Model], where: str, params: list[Any]) -> int:
    """Delete the rows of ``model`` that ``where`` selects, after everything that points at
    them: CASCADE relations are deleted (recursively), SET_NULL ones cleared."""
    table = _qn(model._meta.db_table)
    selected = f"SELECT {_qn(model._meta.pk.column)} FROM {table} WHERE {where}"
    # include_hidden: relations named "+" (Item.project, CacheEvent.previous_call, ...)
    # are left out of _meta.related_objects but hold foreign keys all the same.
    relations = [
        f for f in model._meta.get_fields(include_hidden=True) if f.auto_created and not f.concrete and f.is_relation
    ]
    for rel in relations:
        child = rel.related_model
        column = _qn(rel.field.column)
        if rel.on_delete is models.SET_NULL:
            cursor.execute(
                f"UPDATE {_qn(child._meta.db_table)} SET {column} = NULL WHERE {column} IN ({selected})", params
            )
        elif rel.on_delete is models.CASCADE:
            _delete_where(cursor, child, f"{column} IN ({selected})", params)
        else:
            # Every relation here is CASCADE or SET_NULL (tests/test_retention.py checks it). A
            # PROTECT or DO_NOTHING added later must decide its own rule: refuse rather than guess.
            raise ValueError(f"{child.__name__}.{rel.field.name}: on_delete={rel.on_delete.__name__} "
                             "has no set-based delete rule in manifests/retention.py")
    cursor.execute(f"DELETE FROM {table} WHERE {where}", params)
    return cursor.rowcount


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
            expired["calls"] += _delete_where(cursor, Call, f"{_qn('id')} IN ({marks})", ids)
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


def enforce_retention(*, now: datetime | None = None) -> dict[str, int]:
    """Apply every project's retention; what the daily beat task runs."""
    totals = {"calls": 0, "runs": 0, "prefixes": 0, "rollups": 0}
    for project in Project.objects.order_by("pk"):
        for key, count in expire_project(project=project, now=now).items():
            totals[key] += count
    return totals
