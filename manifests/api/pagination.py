"""API pagination with bounded, validated limit and offset (docs/api.md)."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

from manifests.ingest import BadRequest


class BoundedPagination(LimitOffsetPagination):
    """limit 1..MAX_PAGE (default 50) and offset 0..MAX_OFFSET; anything else is a 400,
    not a silent default or a database overflow."""

    default_limit = 50
    max_limit = 500
    max_offset = 10_000_000

    def _bounded(self, request: Request, name: str, default: int, low: int, high: int) -> int:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return default
        if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
            raise BadRequest(f"{name} must be an integer from {low} to {high}", path=f"?{name}")
        return int(raw)

    def get_limit(self, request: Request) -> int:
        return self._bounded(request, "limit", self.default_limit, 1, self.max_limit)

    def get_offset(self, request: Request) -> int:
        return self._bounded(request, "offset", 0, 0, self.max_offset)
