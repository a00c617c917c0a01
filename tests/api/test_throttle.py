"""API throttling when its count store (Redis) is down: the request goes through."""

from __future__ import annotations

import pytest
from django.core.cache import caches
from django.test import override_settings

from manifests.models import Call
from tests.live_support import free_port
from tests.support import manifest

pytestmark = pytest.mark.django_db


def test_it_accepts_manifests_and_reads_while_the_throttle_cache_is_down(api, caplog):
    # A real Redis client against a port where nothing listens: every count fails to connect.
    dead = f"redis://127.0.0.1:{free_port()}/0"
    cache = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": dead}}
    with override_settings(CACHES=cache, CTXVIEW_API_RATES={"ingest": "600/min", "read": "600/min"}):
        # override_settings swaps the cache handler's connections (django.test.signals).
        assert caches["default"]._servers == [dead]
        r = api.post(manifest(call_id="while-redis-is-down"))
        assert r.status_code == 200, r.content
        assert r.json()["accepted"] == 1
        assert api.get("/api/v1/calls/while-redis-is-down").status_code == 200
    assert Call.objects.filter(call_id="while-redis-is-down").exists()
    assert "API throttle skipped" in caplog.text
