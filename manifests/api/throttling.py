"""API throttling per key: 429 with Retry-After (docs/api.md, "Throttling").

Two budgets per API key, ``ingest`` (POST) and ``read`` (GET), each a number of requests
per second, minute, hour or day. Counts live in Django's cache: Redis when REDIS_URL is
set (one count for all server processes), otherwise each process counts on its own.
Requests without a valid key are refused by authentication before any count.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError
from rest_framework.throttling import SimpleRateThrottle

from manifests.models import ApiKey

logger = logging.getLogger(__name__)


class ApiKeyThrottle(SimpleRateThrottle):
    # Rates are read from settings at each request (not frozen at import like DRF's),
    # so a deployment (or a test) can change them.
    def get_rate(self) -> str | None:
        return settings.CTXVIEW_API_RATES.get(self.scope or "") or None

    def allow_request(self, request: Any, view: Any) -> bool:
        self.scope = "read" if request.method in ("GET", "HEAD", "OPTIONS") else "ingest"
        self.rate = self.get_rate()
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return super().allow_request(request, view)
        except (RedisError, OSError) as exc:
            # The count's store is down: fail open. Refusing (or a 500) would turn a Redis
            # outage into lost manifests, while an unthrottled minute costs little; ingest
            # itself does not need Redis (analysis is swept once it is back).
            logger.warning("API throttle skipped: its cache is unavailable (%s)", exc)
            return True

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        key = request.auth
        if not isinstance(key, ApiKey):
            return None  # unauthenticated: answered 401 by the permission check
        # The key digest, not its row id: ids are reused by test databases sharing a Redis.
        return f"ctxview-throttle:{self.scope}:{key.hashed[:32]}"
