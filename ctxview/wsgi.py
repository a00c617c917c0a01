import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
application = get_wsgi_application()


def _warm_up() -> None:
    """Load the URLconf (every view module, DRF, drf-spectacular), the task module and the
    cache client now, as each server worker starts, rather than inside its first request,
    which would otherwise wait for the imports (docs/performance.md, "Ingest").
    Nothing here connects to the database or to Redis."""
    from django.core.cache import cache
    from django.urls import get_resolver

    import manifests.tasks  # noqa: F401 - imported by the first ingest's enqueue

    get_resolver().url_patterns  # noqa: B018 - the attribute access is the import
    getattr(cache, "_cache", None)  # the Redis cache client (the throttle's), created without connecting


_warm_up()
# What the worker has loaded (Django, DRF, the URLconf: most of the objects the collector
# tracks) lives as long as the process; frozen, it is not traversed by the full
# collections that requests creating thousands of objects (ingest batches) set off
# (docs/performance.md, "Ingest"). Garbage made so far is collected first; frozen objects
# are still freed when unreferenced, only a cycle among them would never be (nothing loaded
# at start-up is meant to go away).
gc.collect()
gc.freeze()
