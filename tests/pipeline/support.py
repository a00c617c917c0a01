"""Real Celery workers against real Redis, for the pipeline tests.

The tests publish from this process (the ingest request's on-commit hook) and a
worker subprocess consumes. Both use the same Redis, with a key prefix of the
test's own so that concurrent test runs (and the xdist processes of one run), and the
tasks other tests leave in the queue, never meet. The worker opens the test database
itself: PostgreSQL's test database, or the SQLite test file (ctxview/settings.py puts it
in a file for this).
Nothing here is mocked; when Redis is unreachable the tests fail, they never skip.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from django.db import connection

from ctxview.celery import app

ROOT = Path(__file__).resolve().parents[2]
CELERY = ROOT / ".venv" / "bin" / "celery"
# CI's PostgreSQL run sets REDIS_URL; the SQLite run does not, but Redis runs there
# too and these tests use it explicitly.
REDIS_URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"


def require_redis(url: str = REDIS_URL) -> redis.Redis:
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.exceptions.ConnectionError as exc:
        pytest.fail(f"these tests need a real Redis at {url}: {exc}")
    return client


def database_url() -> str:
    """The URL of the database the tests run on (the test database), for a subprocess."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        name = s["NAME"]
        if not name or "mode=memory" in str(name) or name == ":memory:":
            pytest.fail("the SQLite test database must be a file for a worker to share it (ctxview/settings.py)")
        return f"sqlite:///{name}"
    auth = quote(s["USER"] or "")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def _reset_pools() -> None:
    if app._pool is not None:
        app._pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None


@contextmanager
def broker(url: str, prefix: str) -> Iterator[None]:
    """Publish this process's tasks to ``url`` under ``prefix`` (not eagerly), then restore."""
    saved = {k: app.conf[k] for k in ("broker_url", "task_always_eager", "broker_transport_options")}
    app.conf.update(
        broker_url=url,
        task_always_eager=False,
        broker_transport_options={**saved["broker_transport_options"], "global_keyprefix": prefix},
    )
    _reset_pools()
    try:
        yield
    finally:
        app.conf.update(saved)
        _reset_pools()


class Worker:
    """``celery -A ctxview worker`` in its own process group, logging to a file. ``app`` names
    another module holding the Celery app (tests/pipeline/held_analysis.py, for the fault tests)."""

    def __init__(self, tmp: Path, prefix: str, *, beat: bool = False, pool: str = "solo", concurrency: int = 1,
                 app: str = "ctxview", **env: str) -> None:
        self.name = f"w{uuid.uuid4().hex[:8]}"
        self.log_path = tmp / f"{self.name}.log"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("CTXVIEW_TEST_", "CELERY_"))}
        base.update(
            DATABASE_URL=database_url(),
            REDIS_URL=REDIS_URL,
            CTXVIEW_CELERY_KEY_PREFIX=prefix,
            SECRET_KEY=os.environ.get("SECRET_KEY") or "test-only-secret-key",
            PYTHONUNBUFFERED="1",
        )
        base.update(env)
        command = [
            str(CELERY), "-A", app, "worker", f"--pool={pool}", f"--concurrency={concurrency}", "--loglevel=INFO",
            "-n", f"{self.name}@%h",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
        ]
        if beat:
            command += ["--beat", "--schedule", str(tmp / f"{self.name}-beat")]
        self.log = open(self.log_path, "w")  # closed in stop()
        self.process = subprocess.Popen(command, cwd=ROOT, env=base, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup, no acknowledgement, like a crash."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        self.kill()
        self.log.close()


def wait_for(check: Callable[[], bool], what: str, *, workers: tuple[Worker, ...] = (), timeout: float = 90) -> None:
    """Poll until ``check()``; on timeout fail with the workers' logs (never a skip)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for w in workers:
            if w.process.poll() is not None:
                pytest.fail(f"worker exited with {w.process.returncode} while waiting for {what}:\n{w.text()[-4000:]}")
        time.sleep(0.05)
    logs = "\n\n".join(f"--- {w.name} ---\n{w.text()[-4000:]}" for w in workers)
    pytest.fail(f"timed out waiting for {what}\n{logs}")


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A Redis key prefix of this test's own; its keys are deleted afterwards."""
    client = require_redis()
    value = f"ctxview-test-{uuid.uuid4().hex[:12]}:"
    yield value
    keys = list(client.scan_iter(f"{value}*"))
    if keys:
        client.delete(*keys)


@pytest.fixture
def workers(tmp_path: Path, redis_prefix: str) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(**kwargs: Any) -> Worker:  # Worker's own keywords
        w = Worker(tmp_path, redis_prefix, **kwargs)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()
