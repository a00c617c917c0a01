"""The demo world the dashboard tests read (tests/views/, tests/browser/ and a few others).

The world is the demo, stored through the real ingest path and analysed by the real analysis,
in a project of its own, beside another project that holds a "canary" run no page of the demo
project may show. The ``demo_world`` fixture (tests/conftest.py) commits it outside the
per-test transactions (so a live server thread sees it too) before a module's first test that
needs it, and deletes it when the module ends.

Building the demo costs seconds of ingest and analysis, so each test process builds it once
(``take_snapshot``): the rows that build inserted are copied into tables of their own in the
same database (``demo_world_<table>``, which Django's flush between transactional tests does
not know and leaves alone), then deleted. Each module's ``insert`` copies them back, with the
same primary keys (so the same API key, slugs and links), and ``remove`` deletes them, with
whatever the module added to the world's projects, when the module ends. No module sees
another's writes, and the values never leave the database, so they are the build's to the byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from django.apps import apps
from django.contrib.auth import get_user_model
from django.core.management.color import no_style
from django.db import connection, models, transaction
from django.test import Client

from manifests import ingest, services
from manifests.demo import runs as demo
from manifests.models import Call, Membership, Project
from manifests.storage import partitions
from tests.support import manifest

CANARY = "canary-of-the-other-project"
PASSWORD = "pw-for-tests-only"
COPY_PREFIX = "demo_world_"


@dataclass
class World:
    project: Project
    other: Project
    owner: Any
    member: Any
    outsider: Any
    key: str
    password: str = PASSWORD

    def client(self, user) -> Client:
        c = Client()
        c.force_login(user)
        return c


@dataclass(frozen=True)
class Rows:
    """The rows one table gained in the build: where their copy is, and their range of keys."""

    model: type[models.Model]
    columns: str
    copy: str
    first: int
    last: int


@dataclass(frozen=True)
class Snapshot:
    """The rows building the demo inserted, table by table, and who they belong to."""

    tables: list[Rows]
    days: frozenset  # the days of the demo's calls: their partitions on PostgreSQL
    project: int
    other: int
    users: tuple[int, int, int]
    key: str


def _tables() -> list[type[models.Model]]:
    # Every concrete table keyed by a sequence, the many-to-many ones included (a user's groups, say).
    return [m for m in apps.get_models(include_auto_created=True)
            if m._meta.managed and not m._meta.proxy and isinstance(m._meta.pk, models.AutoField)]


def _last_keys() -> dict[type[models.Model], int]:
    return {m: m._base_manager.aggregate(last=models.Max("pk"))["last"] or 0 for m in _tables()}


def _build(unique: str) -> tuple[int, int, tuple[int, int, int], str]:
    User = get_user_model()
    owner = User.objects.create_user(f"owner-{unique}", password=PASSWORD)
    member = User.objects.create_user(f"member-{unique}", password=PASSWORD)
    outsider = User.objects.create_user(f"outsider-{unique}", password=PASSWORD)
    project = services.create_project(name=f"Demo {unique}", owner=owner)
    services.add_member(project=project, user=member, role=Membership.MEMBER)
    other = services.create_project(name=f"Other {unique}", owner=outsider)
    report = demo.load(project=project)
    assert report["accepted"] == report["calls"], report
    canary = manifest(f"{CANARY}/step-0", run_id=CANARY, agent=f"{CANARY}-agent", model=f"{CANARY}-model")
    canary["items"][0]["reason"] = CANARY
    result = ingest.ingest_body(project=other, body=json.dumps(canary).encode())
    assert result.count(ingest.ACCEPTED) == 1
    _, key = services.create_api_key(project=project, can_ingest=True, can_read=True)
    return project.pk, other.pk, (owner.pk, member.pk, outsider.pk), key


def _copy(before: dict[type[models.Model], int]) -> list[Rows]:
    """Copy the rows inserted since ``before`` was read into tables of their own: keys only
    grow (the test database's sequences are never reset), so they are the rows keyed above it."""
    tables = []
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model, last in before.items():
            table, pk = model._meta.db_table, model._meta.pk.column
            cursor.execute(f"SELECT MIN({q(pk)}), MAX({q(pk)}) FROM {q(table)} WHERE {q(pk)} > %s", [last])
            first, final = cursor.fetchone()
            if first is None:
                continue
            columns = ", ".join(q(f.column) for f in model._meta.concrete_fields)
            copy = q(COPY_PREFIX + table)
            cursor.execute(f"DROP TABLE IF EXISTS {copy}")
            cursor.execute(f"CREATE TABLE {copy} AS SELECT {columns} FROM {q(table)} WHERE {q(pk)} > %s", [last])
            tables.append(Rows(model, columns, copy, first, final))
    return tables


def check_test_database() -> None:
    # Committed outside any test transaction: make sure it is the test database. (pytest-django
    # only sets one up when a collected test is marked django_db; every module using this is.)
    name = str(connection.settings_dict["NAME"])
    assert "test" in name.rsplit("/", 1)[-1], f"refusing to load the demo into {name}: not a test database"


def take_snapshot() -> Snapshot:
    """Build the demo, copy the rows the build inserted, and delete them again."""
    check_test_database()
    before = _last_keys()
    project, other, users, key = _build(uuid4().hex[:8])
    times = Call.objects.filter(project=project).values_list("started_at", flat=True)
    days = frozenset(partitions.day_of(t) for t in times)
    snapshot = Snapshot(_copy(before), days, project, other, users, key)
    remove(snapshot)
    return snapshot


def insert(snapshot: Snapshot) -> World:
    """Copy the snapshot's rows back: the world, as the build left it."""
    check_test_database()
    partitions.ensure_days(snapshot.days)  # a retention test may have dropped a day the demo uses
    q = connection.ops.quote_name
    with transaction.atomic(), connection.cursor() as cursor:  # foreign keys are checked at commit
        for rows in snapshot.tables:
            table = q(rows.model._meta.db_table)
            cursor.execute(f"INSERT INTO {table} ({rows.columns}) SELECT {rows.columns} FROM {rows.copy}")
        # Rows inserted with their keys do not move PostgreSQL's sequences, which a migration test
        # may have set back: past the world's keys, as loaddata leaves them (SQLite needs nothing).
        for statement in connection.ops.sequence_reset_sql(no_style(), [rows.model for rows in snapshot.tables]):
            cursor.execute(statement)
    User = get_user_model()
    owner, member, outsider = (User.objects.get(pk=pk) for pk in snapshot.users)
    return World(project=Project.objects.get(pk=snapshot.project), other=Project.objects.get(pk=snapshot.other),
                 owner=owner, member=member, outsider=outsider, key=snapshot.key)


def remove(snapshot: Snapshot) -> None:
    """Delete the snapshot's rows, then anything added to its projects or users since."""
    q = connection.ops.quote_name
    owners = (Project, get_user_model())
    with transaction.atomic():  # foreign keys are checked at commit
        with connection.cursor() as cursor:
            for rows in reversed(snapshot.tables):
                if rows.model not in owners:  # kept for the cascade below to start from
                    table, pk = q(rows.model._meta.db_table), q(rows.model._meta.pk.column)
                    cursor.execute(f"DELETE FROM {table} WHERE {pk} BETWEEN %s AND %s", [rows.first, rows.last])
        # Django's cascade now finds only what the module added to the world (a key, a run).
        Project.objects.filter(pk__in=[snapshot.project, snapshot.other]).delete()
        get_user_model().objects.filter(pk__in=snapshot.users).delete()


@contextmanager
def committed_then_removed() -> Iterator[None]:
    """Delete, on leaving, every row committed inside (the rows keyed above the keys before),
    for a module fixture that commits what its tests read (``seed_demo``, say)."""
    check_test_database()
    before = _last_keys()
    try:
        yield
    finally:
        after = _last_keys()
        q = connection.ops.quote_name
        with transaction.atomic(), connection.cursor() as cursor:  # foreign keys are checked at commit
            for model in reversed(list(before)):
                if after[model] > before[model]:
                    table, pk = q(model._meta.db_table), q(model._meta.pk.column)
                    cursor.execute(f"DELETE FROM {table} WHERE {pk} > %s", [before[model]])
