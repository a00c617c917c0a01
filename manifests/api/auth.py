"""API key authentication: ``Authorization: Bearer ctx_...``.

Keys are stored as SHA-256 digests, so a database leak does not leak keys; a key
is scoped to one project and to ingest, read and/or configure (the alert rules).
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import BasePermission

from manifests.models import ApiKey, hash_key


class ApiKeyAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request: Any) -> tuple[None, ApiKey] | None:
        header = get_authorization_header(request).split()
        if not header:
            return None
        if header[0].lower() != self.keyword or len(header) != 2:
            raise exceptions.AuthenticationFailed("use 'Authorization: Bearer <project API key>'")
        try:
            raw = header[1].decode("ascii")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("the API key is not valid") from None
        key = ApiKey.objects.select_related("project").filter(hashed=hash_key(raw)).first()
        if key is None or not key.is_active:
            raise exceptions.AuthenticationFailed("the API key is not valid or has been revoked")
        return (None, key)

    def authenticate_header(self, request: Any) -> str:
        # Makes DRF answer 401 (not 403) with a WWW-Authenticate header.
        return 'Bearer realm="ctxview"'


class HasIngestScope(BasePermission):
    message = "this API key may not ingest manifests"

    def has_permission(self, request: Any, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            raise exceptions.NotAuthenticated("send 'Authorization: Bearer <project API key>'")
        return key.can_ingest


class HasReadScope(BasePermission):
    message = "this API key may not read; create a key with the read scope"

    def has_permission(self, request: Any, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            raise exceptions.NotAuthenticated("send 'Authorization: Bearer <project API key>'")
        return key.can_read


class HasConfigureScope(BasePermission):
    """The project's settings through the API (its alert rules and watched facts): reading them needs the
    configure or the read scope, changing them the configure scope."""

    message = "this API key may not change the project's settings; create a key with the configure scope"

    def has_permission(self, request: Any, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            raise exceptions.NotAuthenticated("send 'Authorization: Bearer <project API key>'")
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return key.can_configure or key.can_read
        return key.can_configure


def key_of(request: Any) -> ApiKey:
    """The API key that authenticated ``request``, for a view behind HasIngestScope,
    HasReadScope or HasConfigureScope (which answer 401 for a request without one before the view runs)."""
    key = request.auth
    if not isinstance(key, ApiKey):
        raise exceptions.NotAuthenticated("send 'Authorization: Bearer <project API key>'")
    return key
