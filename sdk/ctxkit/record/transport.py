"""The HTTP side of :class:`ctxkit.record.client.Client`: where the server is, one POST of a
batch, the retry timing helpers, and reading the server's per-manifest answer."""

from __future__ import annotations

import email.utils
import gzip
import http.client
import math
import os
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC
from typing import Any

import msgspec

DEFAULT_HOST = "http://127.0.0.1:8000"  # the server `make run` serves
PATH = "/api/v1/manifests"
BODY_OVERHEAD = len(b'{"manifests":[]}')  # bytes a batch body adds around its manifests


def ctxview_host(given: str | None = None) -> str:
    """The server to send to: ``given``, else ``CTXVIEW_HOST``, else :data:`DEFAULT_HOST`."""
    return given or os.environ.get("CTXVIEW_HOST", "") or DEFAULT_HOST


def ctxview_api_key(given: str | None = None) -> str:
    """The project key to send with: ``given``, else ``CTXVIEW_API_KEY``; empty when neither."""
    return given or os.environ.get("CTXVIEW_API_KEY", "")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def backoff_delay(attempt: int, base: float, cap: float) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)] (spreads retrying clients apart)."""
    return random.uniform(0.0, min(cap, base * (2 ** min(attempt, 32))))


def is_transient(status: int | None) -> bool:
    """Worth retrying: no answer at all, 5xx, 408 or 429."""
    return status is None or status >= 500 or status in (408, 429)


@dataclass
class Response:
    status: int | None  # None: no HTTP answer (connection refused, timeout, ...)
    body: bytes = b""
    retry_after: float | None = None
    error: str = ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirected POST would be resent as a body-less GET; surface it as an error."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def make_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_NoRedirect)


def post_batch(
    opener: urllib.request.OpenerDirector,
    url: str,
    api_key: str,
    lines: list[bytes],
    *,
    compress: bool,
    timeout: float,
) -> Response:
    """POST ``{"manifests": [...]}`` built from already encoded manifests. Never raises."""
    body = b'{"manifests":[' + b",".join(lines) + b"]}"
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Content-Type": "application/json",
        "User-Agent": "ctxkit-python",
    }
    if compress:
        body = gzip.compress(body, compresslevel=6)
        headers["Content-Encoding"] = "gzip"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with opener.open(request, timeout=timeout) as resp:
            return Response(resp.status, resp.read(), parse_retry_after(resp.headers.get("Retry-After")))
    except urllib.error.HTTPError as exc:
        try:
            data = exc.read()
        except Exception:
            data = b""
        finally:
            exc.close()
        retry_after = parse_retry_after(exc.headers.get("Retry-After")) if exc.headers else None
        return Response(exc.code, data, retry_after)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Response(None, error=f"{type(exc).__name__}: {exc}")


def rejected_in(body: bytes, count: int) -> tuple[int, dict[str, Any]]:
    """How many of ``count`` manifests a 2xx answer rejected, and the first rejection.

    Trusts the top-level ``rejected`` count, else counts ``results``; a body that
    is not the expected JSON means all were taken (the status said so).
    """
    try:
        doc = msgspec.json.decode(body) if body else None
    except msgspec.DecodeError:
        doc = None
    if not isinstance(doc, dict):
        return 0, {}
    results = doc.get("results")
    if not isinstance(results, list):
        results = []
    refused = [r for r in results if isinstance(r, dict) and r.get("status") == "rejected"]
    rejected = doc["rejected"] if isinstance(doc.get("rejected"), int) else len(refused)
    return max(0, min(count, rejected)), (refused[0] if refused else {})
