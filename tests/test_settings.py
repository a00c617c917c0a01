"""Settings fail loudly on bad environment values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load_settings(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL"}}
    clean.update(env)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import ctxview.settings as s; print(s.DATABASES['default']['ENGINE'], s.CELERY_TASK_ALWAYS_EAGER)",
        ],
        cwd=ROOT,
        env=clean,
        capture_output=True,
        text=True,
    )


def test_it_defaults_to_sqlite_and_eager_celery():
    result = load_settings(DEBUG="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["django.db.backends.sqlite3", "True"]


def test_it_uses_postgresql_and_a_real_broker_when_told():
    result = load_settings(SECRET_KEY="k", DATABASE_URL="postgres://u@h:5432/db", REDIS_URL="redis://127.0.0.1:6379/0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["django.db.backends.postgresql", "False"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"DEBUG": "0"}, "SECRET_KEY must be set"),
        ({"DEBUG": "1", "DATABASE_URL": "nonsense://x"}, "DATABASE_URL is not a database URL"),
        ({"DEBUG": "1", "REDIS_URL": "localhost:6379"}, "REDIS_URL='localhost:6379' must start with redis://"),
        ({"DEBUG": "1", "CTXVIEW_MAX_BATCH": "lots"}, "CTXVIEW_MAX_BATCH='lots' is not an integer"),
        ({"DEBUG": "1", "CTXVIEW_MAX_BATCH": "0"}, "CTXVIEW_MAX_BATCH=0 must be at least 1"),
    ],
)
def test_it_fails_loudly_on_a_bad_value(env, message):
    result = load_settings(**env)
    assert result.returncode != 0
    assert message in result.stderr
