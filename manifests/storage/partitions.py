"""Daily time partitions of the raw tables on PostgreSQL (docs/scaling.md, "Partitioning").

On PostgreSQL the calls table and the tables hanging off a call (items, evidence,
compactions, invariants, context edits) are partitioned by RANGE on ``started_at`` (the
call's time, copied onto every child row), one partition per UTC day, named
``<table>_pYYYYMMDD``. Every table of one day is created together, so a call and its
children always land in partitions of the same day and expire together.

Partitions are created ahead by a beat task (``ensure_ahead``) and on demand by ingest for
any day a batch holds that has none yet (late or back-dated calls): an ingest never fails
for a missing partition. There is no DEFAULT partition: a row never lands in a catch-all
that retention cannot drop, and creating a day never has to scan one.

A partition is created standalone and then attached: ``ATTACH PARTITION`` takes only a
SHARE UPDATE EXCLUSIVE lock on the parent, so readers and writers of other days go on
(``CREATE TABLE ... PARTITION OF`` would take an ACCESS EXCLUSIVE lock). The parent's
indexes are built on the attached table, which is empty, so this takes milliseconds.

On SQLite every function here is a no-op: the tables stay plain.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

logger = logging.getLogger(__name__)

# Parents first: the order partitions are created in (and the tables the migration converts).
PARTITIONED_TABLES = (
    "manifests_call",
    "manifests_item",
    "manifests_evidence",
    "manifests_compaction",
    "manifests_invariant",
    "manifests_contextedit",
)
PARTITION_COLUMN = "started_at"

# One advisory lock serialises the creators and droppers of partitions (ingest on demand,
# the beat task, retention), so two never race on the same day's tables.
_PARTITION_LOCK = 0x63747876_70617274  # "ctxvpart"

_NAME = re.compile(r"_p(\d{8})$")


def enabled() -> bool:
    return connection.vendor == "postgresql"


def span(times: Iterable[datetime]) -> dict[str, datetime]:
    """Lookups bounding the partition key by the least and greatest of ``times`` (some
    calls' times): a read of those calls' children by call id that adds them names the
    key, so PostgreSQL plans and reads only those days' partitions, not every day's. No
    lookup for no time (the read matches nothing anyway)."""
    times = list(times)
    if not times:
        return {}
    return {f"{PARTITION_COLUMN}__gte": min(times), f"{PARTITION_COLUMN}__lte": max(times)}


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def day_of(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def _bounds(day: date) -> tuple[str, str]:
    lo = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return lo.isoformat(), (lo + timedelta(days=1)).isoformat()


def missing_days(days: Iterable[date]) -> list[date]:
    """The days among ``days`` whose partitions are not all there (one catalog query)."""
    days = sorted(set(days))
    if not days or not enabled():
        return []
    names = [partition_name(t, d) for d in days for t in PARTITIONED_TABLES]
    with connection.cursor() as cursor:
        cursor.execute("SELECT n FROM unnest(%s::text[]) AS n WHERE to_regclass(quote_ident(n)) IS NULL", [names])
        absent = {row[0] for row in cursor.fetchall()}
    return [d for d in days if any(partition_name(t, d) in absent for t in PARTITIONED_TABLES)]


def _create_day(cursor: CursorWrapper, day: date) -> int:
    lo, hi = _bounds(day)
    created = 0
    for table in PARTITIONED_TABLES:
        name = partition_name(table, day)
        cursor.execute("SELECT to_regclass(quote_ident(%s)) IS NOT NULL", [name])
        if cursor.fetchone()[0]:
            continue
        # LIKE copies the columns, defaults and CHECK constraints; ATTACH adds the
        # partition constraint and builds the parent's indexes (the table is empty).
        cursor.execute(
            f'CREATE TABLE "{name}" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
            "INCLUDING STORAGE INCLUDING COMPRESSION)"
        )
        cursor.execute(f'ALTER TABLE "{table}" ATTACH PARTITION "{name}" FOR VALUES FROM (%s) TO (%s)', [lo, hi])
        created += 1
    return created


# Days whose partitions this process saw committed, per database: ingest skips its catalog
# query for them. Only a check made outside any transaction fills it (what it saw cannot be
# rolled back); this process's drop_day and any failed ingest attempt forget days, so a day
# dropped by another process costs one retried attempt, never a lost call.
_seen: dict[str, set[date]] = {}


def forget_seen() -> None:
    """Forget the days seen (after a failed store: a partition may have been dropped)."""
    _seen.clear()


def ensure_days(days: Iterable[date], *, use_seen: bool = False) -> int:
    """Create the partitions of every day in ``days`` that lacks them; returns how many
    tables were created. Cheap when nothing is missing (one catalog query, no lock), and
    with ``use_seen`` free for days this process has seen already."""
    days = set(days)
    if not days or not enabled():
        return 0
    seen = _seen.setdefault(connection.settings_dict["NAME"], set()) if use_seen else set()
    if days <= seen:
        return 0
    missing = missing_days(days - seen)
    created = 0
    if missing:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = {int(settings.CTXVIEW_INGEST_LOCK_TIMEOUT_MS)}")
            lock(cursor)
            for day in missing:
                created += _create_day(cursor, day)
        if created:
            logger.info("created %d partitions for %s", created, ", ".join(str(d) for d in missing))
    if use_seen and not connection.in_atomic_block:
        seen.update(days)  # present now: found, or created and committed above (a failure raised)
    return created


def ensure_range(start: datetime, end: datetime) -> int:
    first, last = day_of(start), day_of(end)
    return ensure_days(first + timedelta(days=n) for n in range((last - first).days + 1))


def ensure_ahead(*, now: datetime | None = None, days: int | None = None) -> int:
    """Today's partitions and those of the next ``days`` days (CTXVIEW_PARTITIONS_AHEAD_DAYS):
    what the beat task runs, so ingest finds its partitions already there."""
    now = now or datetime.now(UTC)
    ahead = settings.CTXVIEW_PARTITIONS_AHEAD_DAYS if days is None else days
    return ensure_range(now, now + timedelta(days=ahead))


def partition_days(table: str = "manifests_call") -> list[date]:
    """The days that have a partition of ``table``, oldest first (pg_inherits)."""
    if not enabled():
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(quote_ident(%s))",
            [table],
        )
        names = [row[0] for row in cursor.fetchall()]
    days = []
    for name in names:
        match = _NAME.search(name)
        if match:
            days.append(datetime.strptime(match.group(1), "%Y%m%d").date())
    return sorted(days)


def drop_day(cursor: CursorWrapper, day: date) -> None:
    """Drop one day's partitions of every partitioned table (children first). The caller
    has deleted or cleared the rows of plain tables that point into them."""
    _seen.get(connection.settings_dict["NAME"], set()).discard(day)
    for table in reversed(PARTITIONED_TABLES):
        cursor.execute(f'DROP TABLE IF EXISTS "{partition_name(table, day)}"')


def lock(cursor: CursorWrapper) -> None:
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_PARTITION_LOCK])
