"""A real gunicorn server on the test database, for what Django's test server cannot do
(chunked request bodies) and for tests that want the production server (throttling,
schemathesis). The data a test writes must be committed: use django_db(transaction=True)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def gunicorn(port: int | None = None, **env: str) -> Iterator[str]:
    """Serve the project on the current test database; yields the base URL. One worker, so
    the per-process throttle counts (no Redis here: analysis runs eagerly) are exact. ``port``:
    a given one (to stop and start the server again where its clients expect it), else a free one."""
    port = port or free_port()
    environ = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DEBUG"}}
    environ.update(DATABASE_URL=database_url(), SECRET_KEY="live-tests", ALLOWED_HOSTS="127.0.0.1", **env)
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "ctxview.wsgi", "-b", f"127.0.0.1:{port}", "-w", "1", "--threads", "4",
         "--log-level", "warning"],
        cwd=ROOT, env=environ,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("gunicorn did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=20)
