"""ctxview settings: one file, driven by environment variables.

Every value is read through a small helper that fails loudly on a bad value, so a
typo in the environment stops the process at start-up instead of running with a
silent default.
"""

import os
import tempfile
from datetime import timedelta
from pathlib import Path

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

# Django's generic classes (ModelAdmin[Project], ModelForm[ModelPrice], ...) subscriptable at run
# time, as django-stubs types them for the type check.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [part.strip() for part in raw.split(",") if part.strip()]


DEBUG = env_bool("DEBUG", False)

DEVELOPMENT_SECRET_KEY = "ctxview-insecure-development-key-do-not-use-in-production"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (make run sets DEBUG=1 for the demo)")
    SECRET_KEY = DEVELOPMENT_SECRET_KEY
elif SECRET_KEY == DEVELOPMENT_SECRET_KEY and not DEBUG:
    raise ImproperlyConfigured("SECRET_KEY is the repository's development key: set a random one in production")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# HTTPS. One switch for a deployment behind TLS; each part can still be set on its own
# (docs/configuration.md). Off by default: `make run` serves plain HTTP on 127.0.0.1.
CTXVIEW_HTTPS = env_bool("CTXVIEW_HTTPS", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", CTXVIEW_HTTPS)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", CTXVIEW_HTTPS)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", CTXVIEW_HTTPS)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if CTXVIEW_HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", CTXVIEW_HTTPS)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", CTXVIEW_HTTPS)
# Behind a TLS-terminating proxy: the header it sets, e.g. X-Forwarded-Proto (value "https").
_proxy_header = os.environ.get("CTXVIEW_PROXY_SSL_HEADER", "").strip()
if _proxy_header:
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https")
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # WhiteNoise (not runserver's own handler) serves static files under `make run` too,
    # through the middleware below, so they are compressed there as in production.
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "csp",
    "manifests",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "manifests.middleware.StaticGZipMiddleware",
    "manifests.middleware.RejectNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it answers a locked-out login with 429.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

# Content Security Policy: scripts only from our own static files (no inline script, no
# eval); styles also 'unsafe-inline' because Plotly and Swagger UI set style attributes
# and inject <style> elements, and the templates use a few style attributes (a style cannot
# run code; docs/configuration.md). data: images for Plotly's and Swagger UI's icons.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "worker-src": ["'self'", "blob:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# Failed logins (django-axes): after CTXVIEW_LOGIN_FAILURES failures for one user name, or
# from one address, further attempts are refused (429) for CTXVIEW_LOGIN_COOLOFF_MINUTES.
# Failures are counted in the database, so this works with or without Redis.
AXES_FAILURE_LIMIT = env_int("CTXVIEW_LOGIN_FAILURES", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("CTXVIEW_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
# Behind N proxies, the client address is the Nth from the right of X-Forwarded-For.
if env_int("CTXVIEW_PROXY_COUNT", 0):
    AXES_IPWARE_PROXY_COUNT = env_int("CTXVIEW_PROXY_COUNT", 0)
    AXES_IPWARE_META_PRECEDENCE_ORDER = ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"]

ROOT_URLCONF = "ctxview.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "ctxview.wsgi.application"

# SQLite file by default (the embedded default of `make run`); PostgreSQL when
# DATABASE_URL says so. The same migrations serve both.
_default_db = f"sqlite:///{os.environ.get('CTXVIEW_SQLITE_PATH', BASE_DIR / 'ctxview.sqlite3')}"
try:
    DATABASES = {"default": dj_database_url.parse(os.environ.get("DATABASE_URL") or _default_db, conn_max_age=60)}
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the dashboard read while a batch is written; a busy timeout instead of
    # "database is locked" when the worker and a request write at once.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    # Covering indexes (INCLUDE) serve PostgreSQL's index-only reads; SQLite builds the same
    # indexes without the included columns, which is all it can use.
    SILENCED_SYSTEM_CHECKS = ["models.W040"]
    # The test database is a file (in memory-backed /dev/shm when there is one), not
    # SQLite's private in-memory database, so the Celery worker the pipeline tests start
    # can open it too; one file per test process, so concurrent runs never share one.
    _test_dir = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    DATABASES["default"]["TEST"] = {"NAME": str(_test_dir / f"ctxview-test-{os.getpid()}.sqlite3")}
else:
    # One test database per test process here too, so two suites (two checkouts, or
    # a developer's run beside CI) never create or drop each other's database.
    DATABASES["default"]["TEST"] = {"NAME": f"test_{DATABASES['default']['NAME']}_{os.getpid()}"}

# Behind a transaction-mode pooler (PgBouncer, docs/deploy.md) a connection is not the
# same server session from one transaction to the next: no server-side cursors, and no
# persistent connections of Django's own (the pooler keeps them).
if env_bool("CTXVIEW_DB_POOLER", False):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"]["CONN_MAX_AGE"] = 0
elif DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3" and not env_bool("CTXVIEW_PG_JIT", False):
    # PostgreSQL's JIT compiles any plan estimated above jit_above_cost. Over daily
    # partitions a dashboard read has hundreds of plan nodes, and compiling them costs
    # many times what running the query does (docs/performance.md, "Dashboard pages").
    # These reads are short; JIT never pays. PgBouncer refuses this
    # startup option, so behind it the database carries the setting (docs/deploy.md).
    _options = DATABASES["default"].setdefault("OPTIONS", {})
    _options["options"] = f"{_options.get('options', '')} -c jit=off".strip()

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Ingestion limits. Each breach is answered with a 4xx naming what was too large.
CTXVIEW_MAX_BODY_BYTES = env_int("CTXVIEW_MAX_BODY_BYTES", 10 * 1024 * 1024, minimum=1024)
CTXVIEW_MAX_BATCH = env_int("CTXVIEW_MAX_BATCH", 500, minimum=1)
# The longest a batch waits for a lock held by another writer (milliseconds) before its
# transaction is retried once and, if the wait persists, answered 503 + Retry-After.
# Two waits stay well inside a server's request timeout (gunicorn's default is 30 s).
CTXVIEW_INGEST_LOCK_TIMEOUT_MS = env_int("CTXVIEW_INGEST_LOCK_TIMEOUT_MS", 5_000, minimum=10)
# OTLP exports handled at once per process; more get 429 + Retry-After (the exporter retries).
CTXVIEW_OTLP_MAX_CONCURRENT = env_int("CTXVIEW_OTLP_MAX_CONCURRENT", 4, minimum=1)
# Django refuses request bodies above this; keep it just above our own limit so
# that our 413 with a clear message answers first.
DATA_UPLOAD_MAX_MEMORY_SIZE = CTXVIEW_MAX_BODY_BYTES + 1

# Retention (docs/configuration.md): raw calls and everything derived from them expire
# after CTXVIEW_RETENTION_DAYS (a project may set its own); rollups, which the trend
# charts read, after CTXVIEW_ROLLUP_RETENTION_DAYS (never before the raw rows).
CTXVIEW_RETENTION_DAYS = env_int("CTXVIEW_RETENTION_DAYS", 30, minimum=1)
CTXVIEW_ROLLUP_RETENTION_DAYS = env_int("CTXVIEW_ROLLUP_RETENTION_DAYS", 400, minimum=1)
# PostgreSQL only (docs/scaling.md): the raw tables have one partition per UTC day; the
# hourly beat task keeps today's and this many days ahead created.
CTXVIEW_PARTITIONS_AHEAD_DAYS = env_int("CTXVIEW_PARTITIONS_AHEAD_DAYS", 7, minimum=1)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["manifests.api.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["manifests.api.auth.HasReadScope"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "manifests.api.pagination.BoundedPagination",
    "PAGE_SIZE": 50,
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "manifests.api.views.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["manifests.api.throttling.ApiKeyThrottle"],
}


def env_rate(name: str, default: str) -> str:
    """A DRF rate such as 600/min ("" or "off" turns the limit off)."""
    raw = os.environ.get(name, default).strip()
    if raw.lower() in ("", "off", "0"):
        return ""
    count, _, period = raw.partition("/")
    if not count.isdigit() or int(count) < 1 or period[:1] not in ("s", "m", "h", "d"):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a rate: use e.g. 600/min, 20/s, 10000/hour or off")
    return raw


# Requests per API key (docs/api.md, "Throttling"): a burst over the limit is answered 429
# with Retry-After, which ctxkit's client waits out before it resends.
CTXVIEW_API_RATES = {
    "ingest": env_rate("CTXVIEW_INGEST_RATE", "600/min"),
    "read": env_rate("CTXVIEW_READ_RATE", "600/min"),
}

SPECTACULAR_SETTINGS = {
    "TITLE": "ctxview API",
    "DESCRIPTION": "Ingest and read context manifests: what filled each model call's context window, and why.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # 3.1: its schemas are JSON Schema 2020-12, the dialect of the manifest schema (nullable fields).
    "OAS_VERSION": "3.1.0",
    # A resource's one serializer gives two components: AlertRule (answers, with id and state)
    # and AlertRuleRequest (what a client sends).
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "manifests.api.openapi.postprocess",
    ],
    # Swagger UI from the installed sidecar package: the API reference works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Celery. Without REDIS_URL tasks run eagerly in-process, so the embedded default
# needs no server; with it, a real worker consumes them.
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"REDIS_URL={REDIS_URL!r} must start with redis://, rediss:// or unix://")
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL

# Rollup refresh interval (docs/configuration.md): parsed, with the beat schedule, in
# ctxview/celery.py; 5 s by default with Redis, 0 (refresh right after each analysis) without.
from ctxview.celery import ROLLUP_INTERVAL_SECONDS  # noqa: E402 - after REDIS_URL, which it depends on

if ROLLUP_INTERVAL_SECONDS > 0 and not REDIS_URL:
    raise ImproperlyConfigured(
        f"CTXVIEW_ROLLUP_INTERVAL_SECONDS={ROLLUP_INTERVAL_SECONDS:g} needs REDIS_URL: without Redis no beat runs "
        "to refresh the rollups; leave it unset (0, refresh right after each analysis)"
    )
CTXVIEW_ROLLUP_INTERVAL_SECONDS = ROLLUP_INTERVAL_SECONDS

# The cache holds the API throttle counts and each run's saved rereads walk, keyed by row ids:
# shared in Redis when there is one. Deployments (or test workers, each with its own database)
# sharing one Redis keep their keys apart by a prefix.
CACHE_KEY_PREFIX = os.environ.get("CTXVIEW_CACHE_KEY_PREFIX", "")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL,
                          "KEY_PREFIX": CACHE_KEY_PREFIX}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "KEY_PREFIX": CACHE_KEY_PREFIX}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
