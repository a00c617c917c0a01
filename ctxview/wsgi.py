import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
application = get_wsgi_application()


def _warm_up() -> None:
    """Load the URLconf (every view module, DRF, drf-spectacular), the task module and the
    cache client now, as each server worker starts, rather than inside its first request,
    which otherwise waits about a second for the imports (docs/performance.md, "Ingest").
    Nothing here connects to the database or to Redis."""
    from django.core.cache import cache
    from django.urls import get_resolver

    import manifests.tasks  # noqa: F401 - imported by the first ingest's enqueue

    get_resolver().url_patterns  # noqa: B018 - the attribute access is the import
    getattr(cache, "_cache", None)  # the Redis cache client (the throttle's), created without connecting


_warm_up()
