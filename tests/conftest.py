"""Fixtures: fixed owner / member / outsider users, two projects, and keys.

Tests talk to the real database named by DATABASE_URL (PostgreSQL in CI, the
SQLite default otherwise): nothing here is mocked.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from manifests import services
from manifests.models import Membership


def pytest_configure(config: pytest.Config) -> None:
    # Most tests create users (three per ``project``) and many log in: PBKDF2's deliberate
    # cost per hash would dominate them and tests nothing here. Django's documented fast
    # hasher for tests; production settings are untouched (tests/test_settings.py loads them).
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # Each xdist worker has a database of its own but shares Redis with the others: the cache's
    # keys hold row ids (a throttle's key, a run's saved walk), which two databases both have.
    # Set before any cache is opened; the environment carries it to the Celery workers tests start.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        prefix = f"{settings.CACHE_KEY_PREFIX}test-{worker}"
        os.environ["CTXVIEW_CACHE_KEY_PREFIX"] = prefix
        settings.CACHES["default"]["KEY_PREFIX"] = prefix


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete() -> Iterator[None]:
    """On PostgreSQL, empty the tables after each transactional test with DELETE, not TRUNCATE.

    Django's flush truncates every table; TRUNCATE costs per relation (each daily partition
    and each index gets a new file), however few rows there are, while a test leaves a few
    rows behind. Django's foreign keys on PostgreSQL are deferrable and the flush runs in one
    transaction, so the order of the DELETEs does not matter. SQLite's flush is DELETE already.
    """
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:  # only TRUNCATE ... RESTART IDENTITY resets them: keep Django's
            return truncate(self, style, tables, reset_sequences=True, allow_cascade=allow_cascade)
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};" for table in tables]

    DatabaseOperations.sql_flush = sql_flush
    try:
        yield
    finally:
        DatabaseOperations.sql_flush = truncate


class Api:
    """A small wrapper around DRF's APIClient that posts manifests with a key."""

    def __init__(self, key: str | None) -> None:
        self.client = APIClient()
        self.key = key

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"HTTP_AUTHORIZATION": f"Bearer {self.key}"} if self.key else {}
        headers.update(extra or {})
        return headers

    def post(
        self,
        body: Any,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
        gzip_body: bool = False,
        **headers: str,
    ):
        data = raw if raw is not None else json.dumps(body).encode()
        extra = dict(headers)
        if gzip_body:
            data = gzip.compress(data)
            extra["HTTP_CONTENT_ENCODING"] = "gzip"
        return self.client.generic("POST", "/api/v1/manifests", data, content_type=content_type, **self._headers(extra))

    def get(self, path: str, **params: Any):
        return self.client.get(path, params, **self._headers())


@pytest.fixture
def owner(db):
    return get_user_model().objects.create_user("alice", password="password-alice")


@pytest.fixture
def member(db):
    return get_user_model().objects.create_user("bob", password="password-bob")


@pytest.fixture
def outsider(db):
    return get_user_model().objects.create_user("charlie", password="password-charlie")


@pytest.fixture
def project(owner, member):
    p = services.create_project(name="Alpha", owner=owner)
    services.add_member(project=p, user=member, role=Membership.MEMBER)
    return p


@pytest.fixture
def other_project(outsider):
    return services.create_project(name="Bravo", owner=outsider)


@pytest.fixture
def key(project) -> str:
    return services.create_api_key(project=project, can_ingest=True, can_read=True)[1]


@pytest.fixture
def other_key(other_project) -> str:
    return services.create_api_key(project=other_project, can_ingest=True, can_read=True)[1]


@pytest.fixture
def api(key) -> Api:
    return Api(key)


@pytest.fixture(scope="session")
def demo_snapshot(django_db_setup, django_db_blocker) -> Any:
    """The demo world's rows, built once per test process (tests/demo_world.py)."""
    from tests.demo_world import take_snapshot

    with django_db_blocker.unblock():
        return take_snapshot()


@pytest.fixture(scope="module")
def demo_world(demo_snapshot, django_db_blocker) -> Iterator[Any]:
    """The demo world, committed for the module's tests and deleted when the module ends."""
    from tests.demo_world import insert, remove

    with django_db_blocker.unblock():
        world = insert(demo_snapshot)
    try:
        yield world
    finally:
        with django_db_blocker.unblock():
            remove(demo_snapshot)


@pytest.fixture
def standin() -> Iterator[Any]:
    """The local stand-in for the Anthropic and OpenAI APIs (tests/proxy/provider_standin.py)."""
    from tests.proxy.provider_standin import StandIn

    with StandIn() as server:
        yield server


@pytest.fixture
def sender(live_server, key) -> Iterator[Any]:
    """ctxkit's Client sending to the live server, flushing quickly (instrument tests)."""
    from ctxkit import Client

    client = Client(key, live_server.url, flush_interval=0.05, max_retries=1)
    yield client
    client.shutdown(timeout=5)
