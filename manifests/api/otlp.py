"""``POST /v1/traces``: the OTLP/HTTP trace endpoint (mapping in manifests/ingest/otlp.py).

Answers as the OTLP spec asks: 200 with an ExportTraceServiceResponse in the request's
encoding (``partialSuccess`` lists spans refused; with none refused its message is a
warning naming the spans ignored), 400 for a body that is not a request (a google.rpc.Status
in the request's encoding), 401 for a missing or bad key, 413 for a body over
CTXVIEW_MAX_BODY_BYTES (compressed or not), 415 for other content types or encodings, and
429 with Retry-After when more exports are in flight than CTXVIEW_OTLP_MAX_CONCURRENT
(the exporter retries those).
"""

from __future__ import annotations

import threading
import zlib

from django.conf import settings
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rest_framework import exceptions

from manifests import ingest
from manifests.api.auth import ApiKeyAuthentication
from manifests.ingest import otlp

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# Exports in flight in this process, per configured limit (a test may change the setting).
_slots_lock = threading.Lock()
_slots: dict[str, threading.Semaphore] = {}


def _semaphore() -> threading.Semaphore:
    limit = settings.CTXVIEW_OTLP_MAX_CONCURRENT
    key = str(limit)
    with _slots_lock:
        if key not in _slots:
            _slots[key] = threading.Semaphore(limit)
        return _slots[key]


def _reply(message: Message, content_type: str, status: int, headers: dict[str, str] | None = None) -> HttpResponse:
    if content_type == PROTOBUF:
        body = message.SerializeToString()
    else:
        body = json_format.MessageToJson(message, indent=None).encode()
    response = HttpResponse(body, content_type=content_type, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _error(message: str, content_type: str, status: int, headers: dict[str, str] | None = None) -> HttpResponse:
    # google.rpc.Status code: 3 INVALID_ARGUMENT, 16 UNAUTHENTICATED, 8 RESOURCE_EXHAUSTED.
    code = {400: 3, 401: 16, 413: 3, 415: 3, 429: 8, 503: 14}.get(status, 2)
    return _reply(Status(code=code, message=message), content_type, status, headers)


def _body(request: HttpRequest) -> bytes:
    limit = settings.CTXVIEW_MAX_BODY_BYTES
    body = request.read(limit + 1)
    if len(body) > limit:
        raise ingest.BadRequest(f"the body is larger than {limit} bytes; export smaller batches", status=413)
    encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise ingest.BadRequest(f"Content-Encoding {encoding}: only gzip is accepted", status=415)
    decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ingest.BadRequest(f"the body is not valid gzip: {exc}") from None
    if len(data) > limit or decompressor.unconsumed_tail:
        raise ingest.BadRequest(f"the decompressed body is larger than {limit} bytes", status=413)
    return data


@csrf_exempt
@require_POST
def traces(request: HttpRequest) -> HttpResponse:
    content_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if content_type not in (PROTOBUF, JSON):
        return _error(f"Content-Type {content_type or '(none)'}: send {PROTOBUF} or {JSON}", JSON, 415)
    try:
        auth = ApiKeyAuthentication().authenticate(request)
    except exceptions.AuthenticationFailed as exc:
        return _error(str(exc.detail), content_type, 401)
    if auth is None:
        return _error("send 'Authorization: Bearer <project API key>' (OTEL_EXPORTER_OTLP_HEADERS)",
                      content_type, 401)
    key = auth[1]
    if not key.can_ingest:
        return _error("this API key may not ingest", content_type, 403)
    slot = _semaphore()
    if not slot.acquire(blocking=False):
        return _error("too many exports in flight; retry", content_type, 429, {"Retry-After": "1"})
    try:
        try:
            export = otlp.decode_request(_body(request), content_type)
        except ingest.BadRequest as exc:
            return _error(exc.message, content_type, exc.status)
        except otlp.OtlpBadRequest as exc:
            return _error(str(exc), content_type, 400)
        try:
            mapped = otlp.map_export(key.project, export)
            rejected = list(mapped.rejected)
            batch = settings.CTXVIEW_MAX_BATCH
            for start in range(0, len(mapped.manifests), batch):
                report = ingest.ingest_manifests(project=key.project, manifests=mapped.manifests[start:start + batch])
                rejected += [f"call {r.call_id}: " + "; ".join(e.message for e in r.errors[:2])
                             for r in report.results if r.status == ingest.REJECTED]
        except OperationalError:
            # The database is unavailable or locked: transient, the exporter retries.
            return _error("storage unavailable; retry", content_type, 503, {"Retry-After": "5"})
    finally:
        slot.release()
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = len(rejected)
        response.partial_success.error_message = "; ".join(rejected[:5])[:2000]
    elif mapped.ignored:
        # rejected_spans 0 with a message is a warning in OTLP: nothing to retry.
        response.partial_success.error_message = (
            f"{mapped.ignored} of {mapped.spans} spans ignored: not GenAI inference spans")
    return _reply(response, content_type, 200)
