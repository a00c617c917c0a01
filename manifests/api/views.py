"""The REST API: manifest ingest and the read endpoints.

DRF handles the HTTP layer (auth, negotiation, pagination, OpenAPI); the manifest
body itself is validated by ctxkit's msgspec types in manifests/ingest/door.py, far
cheaper than nested DRF serializers.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any, Protocol, cast

from django.conf import settings
from django.core.handlers.wsgi import WSGIRequest
from django.db.models import Count, F, Prefetch, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, UnreadablePostError
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import exceptions, generics, serializers, status
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, set_rollback
from rest_framework.views import exception_handler as drf_exception_handler

from ctxkit.manifest import EARLIEST, LATEST, MAX_NAME, MAX_PATH, json_schema
from manifests import figures, ingest, ops
from manifests.api.auth import HasIngestScope, HasReadScope, key_of
from manifests.api.pagination import BoundedPagination
from manifests.api.serializers import CallDetailSerializer, CallSummarySerializer, RunSerializer
from manifests.models import Call, CallKey, Compaction, ContextEdit, Evidence, Invariant, Item, Run
from manifests.selectors import calls as call_selectors

logger = logging.getLogger(__name__)
_CONTROL = re.compile("[\x00-\x1f\x7f]")


class LengthRequired(exceptions.APIException):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    default_detail = "this server cannot read a chunked body: send Content-Length (gunicorn reads chunked bodies)"
    default_code = "length_required"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "request body too large"
    default_code = "payload_too_large"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with every error in one shape: {"error": ..., "errors": [{path, message}]}."""
    if isinstance(exc, UnreadablePostError):
        return _client_disconnected(exc, context)
    if isinstance(exc, ingest.Busy):
        message = "the database is busy with concurrent writes; retry after the Retry-After delay"
        return Response(
            {"error": message, "errors": [{"path": "$", "message": message}]},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(exc.retry_after_seconds)},
        )
    if isinstance(exc, ingest.BadRequest):
        return Response(
            {"error": exc.message, "errors": [{"path": exc.path, "message": exc.message}]}, status=exc.status
        )
    response = drf_exception_handler(exc, context)
    if response is None:
        # Anything else is our bug: logged with its traceback, answered in the documented shape.
        logger.error("API error in %s", context.get("view").__class__.__name__, exc_info=exc)
        set_rollback()
        return Response(error_body("internal server error"), status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    if isinstance(response.data, dict) and "detail" in response.data:
        response.data = error_body(str(response.data["detail"]))
    return response


class _DjangoInternals(Protocol):
    """Attributes Django keeps on its requests and responses that its stubs do not declare."""

    _has_been_logged: bool  # a response already logged: Django's request log skips it
    _read_started: bool  # a request whose body has been read from
    _resource_closers: list[Callable[[], object]]  # called when the WSGI server closes the response


def error_body(message: str, path: str = "$") -> dict[str, Any]:
    """The one shape of every API error (docs/api.md)."""
    return {"error": message, "errors": [{"path": path, "message": message}]}


def _client_disconnected(exc: Exception, context: dict[str, Any]) -> Response:
    """The client hung up mid-body: logged at info and counted (manifests/ops.py), answered
    400 for the record (nobody reads it), and kept out of Django's request log."""
    ops.client_disconnected(context.get("request"), exc)
    message = "the connection closed before the whole body was received"
    response = Response(error_body(message), status=400)
    # Django's "Bad Request" warning would repeat the info line (a flag of Django's own, not in its stubs).
    cast(_DjangoInternals, response)._has_been_logged = True
    return response


class ManifestBodyParser(BaseParser):
    """Returns the raw (gunzipped) body; ingest.py validates it. Enforces the size limit
    on the compressed and on the decompressed body, so a gzip bomb gets a 413 too."""

    media_type = "application/json"

    def parse(  # type: ignore[override]  # the raw body, not parsed data: ingest decodes it
        self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> bytes:
        limit = settings.CTXVIEW_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        if stream is None:
            return b""
        body = _read_at_most(stream, limit + 1)
        if len(body) > limit:
            raise PayloadTooLarge(f"the body is larger than {limit} bytes; send smaller batches")
        encoding = request.META.get("HTTP_CONTENT_ENCODING", "").strip().lower() if request else ""
        if encoding in ("", "identity"):
            return body
        if encoding != "gzip":
            raise exceptions.UnsupportedMediaType(f"Content-Encoding {encoding}: only gzip is accepted")
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = decompressor.decompress(body, limit + 1)
        except zlib.error as exc:
            raise exceptions.ParseError(f"the body is not valid gzip: {exc}") from None
        if len(data) > limit or decompressor.unconsumed_tail:
            raise PayloadTooLarge(f"the decompressed body is larger than {limit} bytes; send smaller batches")
        return data


def chunked_body(request: Request) -> bytes:
    """A chunked body (no Content-Length): DRF and Django read CONTENT_LENGTH bytes, so it
    would look empty. gunicorn and mod_wsgi de-chunk it into wsgi.input and say so with
    wsgi.input_terminated; on any other server, reading the raw socket would wait for a close
    that never comes, hence 411. The size limit and gzip apply as to any body."""
    if "chunked" not in request.META.get("HTTP_TRANSFER_ENCODING", "").lower():
        return b""
    environ = cast(WSGIRequest, request._request).environ
    if not environ.get("wsgi.input_terminated"):
        raise LengthRequired()
    return ManifestBodyParser().parse(environ["wsgi.input"], parser_context={"request": request})


def _unbuffered(stream: Any) -> Any:
    """The reader under gunicorn's ``wsgi.input`` when nothing has been read yet, else ``stream``.

    gunicorn's ``Body.read(n)`` gathers any body 1 KB at a time, each step copying what its
    two buffers hold: several times the cost of one pass of the reader beneath it (Content-Length
    or chunked; docs/performance.md, "Ingest"), which holds
    the same bytes and the same limit. Django's stream would only add the same
    Content-Length limit, and turns a lost connection into UnreadablePostError, as
    ``_read_at_most`` does here."""
    wsgi_input = stream
    if isinstance(stream, HttpRequest):
        if cast(_DjangoInternals, stream)._read_started:
            return stream
        wsgi_input = stream.META.get("wsgi.input")
    reader = getattr(wsgi_input, "reader", None)
    buffered = getattr(wsgi_input, "buf", None)
    if type(wsgi_input).__module__ != "gunicorn.http.body" or reader is None or buffered is None or buffered.tell():
        return stream
    if isinstance(stream, HttpRequest):
        cast(_DjangoInternals, stream)._read_started = True  # as Django's own read would mark it
    return reader


def _read_at_most(stream: Any, size: int) -> bytes:
    """Read until EOF or ``size`` bytes: a chunked stream may return less than asked."""
    parts: list[bytes] = []
    remaining = size
    direct = _unbuffered(stream)
    if direct is not stream:
        try:
            return _read_at_most(direct, size)
        except OSError as exc:  # the client went away mid-body
            raise UnreadablePostError(*exc.args) from exc
    while remaining > 0:
        part = stream.read(remaining)
        if not part:
            break
        parts.append(part)
        remaining -= len(part)
    return b"".join(parts)


_result = inline_serializer(
    "ManifestResult",
    {
        "index": serializers.IntegerField(),
        "call_id": serializers.CharField(allow_null=True),
        "status": serializers.ChoiceField(["accepted", "duplicate", "rejected"]),
        "errors": serializers.ListField(child=serializers.DictField(), required=False),
    },
)
_ingest_response = inline_serializer(
    "IngestResponse",
    {
        "accepted": serializers.IntegerField(),
        "duplicates": serializers.IntegerField(),
        "rejected": serializers.IntegerField(),
        "results": _result.__class__(many=True),
    },
)


class ManifestIngestView(APIView):
    permission_classes = [HasIngestScope]
    parser_classes = [ManifestBodyParser]

    @extend_schema(
        summary="Ingest one context manifest or a batch",
        description=(
            "Body: one manifest (schema ctxview.manifest/v1, see /api/v1/schema/manifest.json) or "
            '{"manifests": [...]} (at most CTXVIEW_MAX_BATCH). Optional Content-Encoding: gzip. '
            "Idempotent on (project, call_id): a retry is a duplicate; other content under the same "
            "call_id is rejected as a conflict. 200 when nothing was rejected, 207 when some were, "
            "400 when all were."
        ),
        request={"application/json": {"type": "object"}},
        responses={200: _ingest_response, 207: _ingest_response},
    )
    def post(self, request: Request) -> Response:
        body = request.data or chunked_body(request)
        if not body:
            raise ingest.BadRequest('the body is empty: send one manifest or {"manifests": [...]}')
        with ingest.analysis_after_response() as held:
            report = ingest.ingest_body(project=key_of(request).project, body=body)
        rejected = report.count(ingest.REJECTED)
        code: int
        if rejected == 0:
            code = status.HTTP_200_OK
        elif rejected == len(report.results):
            code = status.HTTP_400_BAD_REQUEST
        else:
            code = status.HTTP_207_MULTI_STATUS
        response = Response(report.to_dict(), status=code)
        if held:
            # The WSGI server closes the response once it is sent: the batch's analysis is
            # enqueued then, while the client goes on (Django's own hook for what a response holds).
            cast(_DjangoInternals, response)._resource_closers.append(partial(ingest.enqueue_analyses, held))
        return response


def _parse_time(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name)
    if not raw:
        return None
    try:
        value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise ingest.BadRequest(
            f"{name} must be an ISO 8601 time, e.g. 2026-11-29T10:00:00Z", path=f"?{name}"
        ) from None
    if value.tzinfo is None:
        raise ingest.BadRequest(f"{name} needs a time zone, e.g. 2026-11-29T10:00:00Z", path=f"?{name}")
    if not EARLIEST <= value <= LATEST:
        raise ingest.BadRequest(f"{name} must be within {EARLIEST:%Y-%m-%d}..{LATEST:%Y-%m-%d}", path=f"?{name}")
    return value


def _parse_text(request: Request, name: str, limit: int = MAX_NAME) -> str:
    value = request.query_params.get(name, "")
    if len(value) > limit or _CONTROL.search(value):
        raise ingest.BadRequest(
            f"{name} must be at most {limit} characters without control characters", path=f"?{name}"
        )
    return value


_filters = [
    OpenApiParameter("agent", str, description="Only this agent"),
    OpenApiParameter("model", str, description="Only this model"),
    OpenApiParameter("since", str, description="ISO 8601 time, inclusive"),
    OpenApiParameter("until", str, description="ISO 8601 time, exclusive"),
]


class RunListView(generics.ListAPIView[Run]):
    pagination_class = BoundedPagination
    serializer_class = RunSerializer
    permission_classes = [HasReadScope]

    @extend_schema(summary="Runs of the key's project, newest first", parameters=[
        *_filters,
        OpenApiParameter("cwd", str, description="Only runs whose agent worked in this directory (exact)"),
        OpenApiParameter("branch", str, description="Only runs on this git branch (exact)"),
    ])
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Run]:
        qs = Run.objects.filter(project=key_of(self.request).project)
        if agent := _parse_text(self.request, "agent"):
            qs = qs.filter(agent=agent)
        if model := _parse_text(self.request, "model"):
            qs = qs.filter(model=model)
        if cwd := _parse_text(self.request, "cwd", MAX_PATH):
            qs = qs.filter(cwd=cwd)
        if branch := _parse_text(self.request, "branch"):
            qs = qs.filter(git_branch=branch)
        if since := _parse_time(self.request, "since"):
            qs = qs.filter(last_seen__gte=since)
        if until := _parse_time(self.request, "until"):
            qs = qs.filter(first_seen__lt=until)
        return qs.annotate(call_count=Count("calls")).order_by("-last_seen", "-pk")


class RunCallListView(generics.ListAPIView[Call]):
    pagination_class = BoundedPagination
    serializer_class = CallSummarySerializer
    permission_classes = [HasReadScope]

    @extend_schema(summary="Calls of one run, by step")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Call]:
        run = generics.get_object_or_404(Run, project=key_of(self.request).project, run_id=self.kwargs["run_id"])
        return Call.objects.filter(run=run).select_related("run", "figures").order_by("step", "started_at", "pk")


class CallDetailView(generics.RetrieveAPIView[Call]):
    serializer_class = CallDetailSerializer
    permission_classes = [HasReadScope]

    @extend_schema(summary="One call with its items, evidence, compactions and context edits")
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_object(self) -> Call:
        # The registry's key gives the call's time: the call and its children are read from
        # its day's partition (PostgreSQL), as the call view reads them (docs/scaling.md).
        project = key_of(self.request).project
        key = CallKey.objects.filter(project=project, call_key=self.kwargs["call_id"]).values_list(
            "call_id", "started_at").first()
        if key is None:
            raise Http404("No Call matches the given query.")  # as get_object_or_404 words it
        pk, at = key
        qs = Call.objects.filter(started_at=at).select_related("run", "figures").prefetch_related(
            Prefetch("items", queryset=Item.objects.filter(started_at=at).order_by("ordinal")),
            Prefetch("evidence", queryset=Evidence.objects.filter(started_at=at)),
            Prefetch("compactions", queryset=Compaction.objects.filter(started_at=at)
                     .annotate(reread_tokens=figures.compaction_reread_tokens())
                     .annotate(net_saving=figures.net_saving(reread=F("reread_tokens"))).prefetch_related(
                Prefetch("invariants", queryset=Invariant.objects.filter(started_at=at)))),
            Prefetch("context_edits", queryset=ContextEdit.objects.filter(started_at=at)),
        )
        call = generics.get_object_or_404(qs, project=project, pk=pk)
        # The calls where evidence was lost are read within the run's time span, as the call
        # view reads them: joined by id alone, PostgreSQL would plan over every day's partition.
        call.attribution_rows = call_selectors.attributions(call)
        return call


@extend_schema(exclude=True)
def manifest_json_schema(request: Any) -> HttpResponse:
    """The manifest's JSON Schema, generated from ctxkit.manifest; public, like any spec."""
    import json

    return HttpResponse(json.dumps(json_schema(), indent=2, sort_keys=True), content_type="application/schema+json")
