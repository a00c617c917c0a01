"""Compression of static files when no compressed copy exists beside them.

In production ``collectstatic`` writes ``.gz`` files (CompressedStaticFilesStorage) and
WhiteNoise serves them. Under ``make run`` (runserver, WHITENOISE_USE_FINDERS) there are
none, and the dashboard's scripts went out uncompressed. This middleware gzips static
responses only: static files hold no secrets, so compressing them cannot leak a CSRF
token the way compressing HTML pages can (BREACH); pages stay as they are.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.middleware.gzip import GZipMiddleware


class StaticGZipMiddleware(GZipMiddleware):
    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if not request.path.startswith(settings.STATIC_URL):
            return response
        # GZipMiddleware leaves alone what WhiteNoise served already compressed (a .gz file).
        return super().process_response(request, response)
