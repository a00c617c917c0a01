"""Settings fail loudly on bad environment values."""

from __future__ import annotations

import json
import os
import secrets
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
        ({"DEBUG": "0", "SECRET_KEY": "ctxview-insecure-development-key-do-not-use-in-production"},
         "the repository's development key"),
        ({"DEBUG": "1", "CTXVIEW_HTTPS": "sometimes"}, "CTXVIEW_HTTPS='sometimes' is not a boolean"),
        ({"DEBUG": "1", "CTXVIEW_INGEST_RATE": "fast"}, "CTXVIEW_INGEST_RATE='fast' is not a rate"),
        ({"DEBUG": "1", "CTXVIEW_READ_RATE": "10/fortnight"}, "CTXVIEW_READ_RATE='10/fortnight' is not a rate"),
        ({"DEBUG": "1", "REDIS_URL": "redis://h:6379/0", "CTXVIEW_ROLLUP_INTERVAL_SECONDS": "soon"},
         "CTXVIEW_ROLLUP_INTERVAL_SECONDS='soon' is not a number"),
        ({"DEBUG": "1", "REDIS_URL": "redis://h:6379/0", "CTXVIEW_ROLLUP_INTERVAL_SECONDS": "-1"},
         "CTXVIEW_ROLLUP_INTERVAL_SECONDS=-1 must be at least 0"),
        ({"DEBUG": "1", "REDIS_URL": "redis://h:6379/0", "CTXVIEW_ROLLUP_INTERVAL_SECONDS": "nan"},
         "CTXVIEW_ROLLUP_INTERVAL_SECONDS='nan' is not a finite number"),
        ({"DEBUG": "1", "CTXVIEW_ROLLUP_INTERVAL_SECONDS": "5"}, "CTXVIEW_ROLLUP_INTERVAL_SECONDS=5 needs REDIS_URL"),
    ],
)
def test_it_fails_loudly_on_a_bad_value(env, message):
    result = load_settings(**env)
    assert result.returncode != 0
    assert message in result.stderr


def rollup_schedule(**env: str) -> list:
    """(settings' interval, the beat entry's schedule or None) in a fresh process."""
    return settings_json(
        "from ctxview.celery import app; e = app.conf.beat_schedule.get('refresh-rollups'); "
        "value = [s.CTXVIEW_ROLLUP_INTERVAL_SECONDS, e and e['schedule']]",
        drop=lambda k: k in {"REDIS_URL", "CTXVIEW_ROLLUP_INTERVAL_SECONDS"}, **env)


def settings_json(statements: str, *, drop, **env: str):
    """``value`` as set by ``statements`` after importing the settings (as ``s``) in a new
    process, with the environment variables ``drop`` names removed and ``env`` added."""
    clean = {k: v for k, v in os.environ.items() if not drop(k)}
    clean.update({"SECRET_KEY": "k", **env})
    code = f"import json, ctxview.settings as s; {statements}; print(json.dumps(value))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_it_schedules_the_rollup_refresh_only_where_a_beat_runs():
    # Without Redis (no beat): 0, the analysis refreshes right after each task, no beat entry.
    assert rollup_schedule() == [0, None]
    assert rollup_schedule(REDIS_URL="redis://h:6379/0") == [5, 5]
    assert rollup_schedule(REDIS_URL="redis://h:6379/0", CTXVIEW_ROLLUP_INTERVAL_SECONDS="2.5") == [2.5, 2.5]
    assert rollup_schedule(REDIS_URL="redis://h:6379/0", CTXVIEW_ROLLUP_INTERVAL_SECONDS="0") == [0, None]


def security_settings(**env: str) -> dict:
    names = ["SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_HSTS_SECONDS",
             "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_PROXY_SSL_HEADER", "CSRF_TRUSTED_ORIGINS"]
    return settings_json(f"value = {{n: getattr(s, n, None) for n in {names!r}}}",
                         drop=lambda k: k.startswith(("SECURE_", "CTXVIEW_", "SESSION_", "CSRF_")), **env)


def test_ctxview_https_turns_on_hsts_ssl_redirect_and_secure_cookies():
    off = security_settings()
    assert not off["SECURE_SSL_REDIRECT"] and not off["SESSION_COOKIE_SECURE"] and off["SECURE_HSTS_SECONDS"] == 0
    on = security_settings(CTXVIEW_HTTPS="1", CTXVIEW_PROXY_SSL_HEADER="X-Forwarded-Proto",
                           CSRF_TRUSTED_ORIGINS="https://ctxview.example.com")
    assert on["SECURE_SSL_REDIRECT"] and on["SESSION_COOKIE_SECURE"] and on["CSRF_COOKIE_SECURE"]
    assert on["SECURE_HSTS_SECONDS"] == 31_536_000 and on["SECURE_HSTS_INCLUDE_SUBDOMAINS"]
    assert on["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert on["CSRF_TRUSTED_ORIGINS"] == ["https://ctxview.example.com"]
    # Each part on its own: TLS at the proxy, but no redirect by Django.
    partial = security_settings(CTXVIEW_HTTPS="1", SECURE_SSL_REDIRECT="0", SECURE_HSTS_SECONDS="600")
    assert not partial["SECURE_SSL_REDIRECT"] and partial["SESSION_COOKIE_SECURE"]
    assert partial["SECURE_HSTS_SECONDS"] == 600


def test_check_deploy_is_clean_with_the_documented_production_environment():
    # DJANGO_ALLOW_ASYNC_UNSAFE: the browser tests set it in this process (Playwright's sync API
    # beside Django's ORM); a production environment never has it.
    env = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE"}}
    env.update(DEBUG="0", CTXVIEW_HTTPS="1", SECRET_KEY=secrets.token_urlsafe(50), ALLOWED_HOSTS="ctxview.example.com")
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def database_options(**env: str) -> dict:
    return settings_json("value = s.DATABASES['default'].get('OPTIONS', {})",
                         drop=lambda k: k in {"DATABASE_URL", "CTXVIEW_DB_POOLER", "CTXVIEW_PG_JIT", "REDIS_URL"},
                         **env)


def test_it_turns_postgresql_jit_off_unless_told():
    pg = "postgres://u@h:5432/db"
    assert database_options(DATABASE_URL=pg)["options"] == "-c jit=off"
    # Options already in the URL are kept.
    assert database_options(DATABASE_URL=pg + "?options=-c%20work_mem%3D8MB")["options"] == "-c work_mem=8MB -c jit=off"
    assert "options" not in database_options(DATABASE_URL=pg, CTXVIEW_PG_JIT="1")
    # PgBouncer refuses the startup option: there the database carries the setting (docs/deploy.md).
    assert "options" not in database_options(DATABASE_URL=pg, CTXVIEW_DB_POOLER="1")
    assert "options" not in database_options()  # SQLite


def test_it_opens_connections_as_each_database_needs(db):
    # PostgreSQL: JIT off (see settings). SQLite: write-ahead log.
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW jit")
            assert cursor.fetchone()[0] == "off"
        else:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone()[0] == "wal"


def test_it_keeps_apart_the_cache_keys_of_deployments_sharing_a_redis():
    code = "import ctxview.settings as s; print(s.CACHES['default']['KEY_PREFIX'] or '-')"
    env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "CTXVIEW_CACHE_KEY_PREFIX"}}
    prefixes = []
    for prefix in ("", "deploy-a"):
        result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                env={**env, "DEBUG": "1", "REDIS_URL": "redis://127.0.0.1:6379/0",
                                     "CTXVIEW_CACHE_KEY_PREFIX": prefix})
        assert result.returncode == 0, result.stderr
        prefixes.append(result.stdout.strip())
    assert prefixes == ["-", "deploy-a"]


def test_each_test_worker_has_cache_keys_of_its_own():
    from django.core.cache import cache

    # Workers have databases of their own, so the same row ids: their keys must not meet in Redis.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    assert cache.make_key("k").startswith(f"test-{worker}:") if worker else cache.make_key("k") == ":1:k"
