"""Request guards that run before any view (NUL in a URL, API errors outside DRF), and the
compression of static files."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.middleware.gzip import GZipMiddleware


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith(("/api/", "/v1/"))


def api_error(message: str, status: int, path: str = "$") -> JsonResponse:
    """The documented error shape (docs/api.md), for answers given outside DRF."""
    return JsonResponse({"error": message, "errors": [{"path": path, "message": message}]}, status=status)


class RejectNulMiddleware:
    """A NUL (``%00``) in the path or the query string is a 400 on every page and endpoint.

    No id, filter or name can hold one (the ingest door replaces NUL in stored text, see
    docs/api.md), and PostgreSQL refuses it in a query parameter with an error, not a miss.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        query = request.META.get("QUERY_STRING", "")
        if "\x00" in request.path or "%00" in query or "\x00" in query:
            message = "the URL holds a NUL character (%00), which no id or filter can contain"
            if is_api(request):
                return api_error(message, 400, path="?" if "\x00" not in request.path else "$")
            return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        return self.get_response(request)


def handler404(request: HttpRequest, exception: Any = None) -> HttpResponse:
    if is_api(request):
        return api_error("not found", 404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def handler500(request: HttpRequest) -> HttpResponse:
    if is_api(request):
        return api_error("internal server error", 500)
    from django.views.defaults import server_error

    return server_error(request)


class StaticGZipMiddleware(GZipMiddleware):
    """Compression of static files when no compressed copy exists beside them.

    In production ``collectstatic`` writes ``.gz`` files (CompressedStaticFilesStorage) and
    WhiteNoise serves them. Under ``make run`` (runserver, WHITENOISE_USE_FINDERS) there are
    none, and the dashboard's scripts went out uncompressed. This middleware gzips static
    responses only: static files hold no secrets, so compressing them cannot leak a CSRF
    token the way compressing HTML pages can (BREACH); pages stay as they are.
    """

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if not request.path.startswith(settings.STATIC_URL):
            return response
        # GZipMiddleware leaves alone what WhiteNoise served already compressed (a .gz file).
        return super().process_response(request, response)
