"""OTLP/HTTP trace ingest: GenAI inference spans become context manifests.

Decoding uses the official protobuf types of ``opentelemetry-proto`` (protobuf bodies parsed
by them; JSON bodies turned into them with ``json_format`` after OTLP/JSON's hex ids are
converted). Mapping (see docs/integrations.md):

- An inference span (``gen_ai.operation.name`` chat / generate_content / text_completion, or
  OpenInference ``openinference.span.kind`` LLM) is one call: call id ``<trace>-<span>``, run
  ``gen_ai.conversation.id`` else the trace id, agent from the enclosing ``invoke_agent`` span
  of the same export, else ``gen_ai.agent.name``, else the resource's ``service.name``.
- Where the agent worked: ``process.working_directory`` and ``vcs.ref.head.name`` (a branch),
  on the span or its resource, become the manifest's workspace.
- A span carrying the attribute ``ctxview.manifest`` (a manifest as JSON, e.g. from ctxkit)
  is stored as that manifest, whatever else it is.
- Every other span (agent, tool, HTTP, ...) is counted and ignored: tokens are summed on
  inference spans only, since agent spans repeat the totals.
- A span with invalid ids (a trace id not 16 bytes, a span id not 8, either all zeros, a
  parent id neither empty nor 8 bytes) is rejected: counted in ``rejected_spans``, not stored.

Idempotent: a span already stored (same call id) is a duplicate and is not mapped again, so
the step numbers assigned on first arrival (the run's next steps, by start time) stay put.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from django.db.models import Max
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ctxkit.context.layout import canonical_json
from ctxkit.manifest import Builder, Manifest, Outcome, Workspace, workspace_of
from ctxkit.record.call_items import Part, call_manifest, text_of
from ctxkit.record.usage import normalize_usage
from manifests.ingest import door
from manifests.models import Call, CallKey, Project, Run

INFERENCE_OPERATIONS = frozenset({"chat", "generate_content", "text_completion"})
MANIFEST_ATTRIBUTE = "ctxview.manifest"
BUILDER = Builder(name="otlp")


class OtlpBadRequest(Exception):
    """The body is not an ExportTraceServiceRequest (answered 400)."""


# --------------------------------------------------------------------------- #
# Decoding


def _hex_to_b64(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        return value
    try:
        return base64.b64encode(bytes.fromhex(value)).decode()
    except ValueError:
        raise OtlpBadRequest(f"trace and span ids must be hex strings in OTLP/JSON, got {value[:40]!r}") from None


def decode_request(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if content_type == "application/x-protobuf":
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise OtlpBadRequest(f"the body is not an ExportTraceServiceRequest protobuf: {exc}") from None
        return request
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise OtlpBadRequest(f"malformed JSON: {exc}") from None
    if not isinstance(data, dict):
        raise OtlpBadRequest("the body must be a JSON object (an ExportTraceServiceRequest)")
    # OTLP/JSON writes ids as hex; protobuf's JSON mapping expects base64 for bytes fields.
    for rs in data.get("resourceSpans") or []:
        for ss in (rs or {}).get("scopeSpans") or []:
            for span in (ss or {}).get("spans") or []:
                if isinstance(span, dict):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = _hex_to_b64(span[key])
                    for link in span.get("links") or []:
                        if isinstance(link, dict):
                            for key in ("traceId", "spanId"):
                                if key in link:
                                    link[key] = _hex_to_b64(link[key])
    try:
        json_format.ParseDict(data, request, ignore_unknown_fields=True)
    except (json_format.ParseError, binascii.Error, TypeError, ValueError) as exc:
        raise OtlpBadRequest(f"not an OTLP/JSON ExportTraceServiceRequest: {exc}") from None
    return request


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


# --------------------------------------------------------------------------- #
# Mapping


@dataclass
class SpanView:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: datetime
    end: datetime | None
    attrs: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    status_message: str
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def call_id(self) -> str:
        return f"{self.trace_id}-{self.span_id}"


@dataclass
class MappedExport:
    manifests: list[Manifest] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # one message per refused span
    ignored: int = 0
    spans: int = 0


def _time(nanos: int) -> datetime | None:
    return datetime.fromtimestamp(nanos / 1e9, tz=UTC) if nanos else None


def spans_of(request: ExportTraceServiceRequest) -> list[SpanView]:
    out = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                start = _time(s.start_time_unix_nano) or _time(s.end_time_unix_nano) or datetime.now(UTC)
                out.append(SpanView(
                    trace_id=s.trace_id.hex(), span_id=s.span_id.hex(), parent_id=s.parent_span_id.hex(),
                    name=s.name, start=start, end=_time(s.end_time_unix_nano), attrs=attributes(s.attributes),
                    resource=resource, status_code=s.status.code, status_message=s.status.message,
                    events=[(e.name, attributes(e.attributes)) for e in s.events],
                ))
    return out


TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8


def invalid_ids(span: SpanView) -> str | None:
    """Why the span's ids are not valid (OTLP: a 16-byte trace id and an 8-byte span id, neither
    all zeros; a parent span id empty for a root span, else 8 bytes), or None. A call id is made
    of them, so a span with bad ids cannot be stored as a call."""
    for name, value, size in (("trace id", span.trace_id, TRACE_ID_BYTES), ("span id", span.span_id, SPAN_ID_BYTES)):
        if len(value) != 2 * size:
            return f"{name} {value[:40]!r} is {len(value) // 2} bytes, not {size}"
        if not value.strip("0"):
            return f"{name} is all zeros"
    if span.parent_id and len(span.parent_id) != 2 * SPAN_ID_BYTES:
        return f"parent span id {span.parent_id[:40]!r} is {len(span.parent_id) // 2} bytes, not {SPAN_ID_BYTES}"
    return None


def _is_inference(span: SpanView) -> bool:
    op = span.attrs.get("gen_ai.operation.name")
    if op in INFERENCE_OPERATIONS:
        return True
    return op is None and str(span.attrs.get("openinference.span.kind", "")).upper() == "LLM"


def _structured(value: Any) -> Any:
    """An attribute that may be a structured value or its JSON string."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _embedded_manifest(span: SpanView) -> Any:
    raw = span.attrs.get(MANIFEST_ATTRIBUTE)
    if raw is None:
        for name, attrs in span.events:
            if name == MANIFEST_ATTRIBUTE and attrs.get(MANIFEST_ATTRIBUTE) is not None:
                return attrs[MANIFEST_ATTRIBUTE]
    return raw


def _agent(span: SpanView, by_id: dict[str, SpanView]) -> str:
    parent, hops = by_id.get(span.parent_id), 0
    while parent is not None and hops < 50:
        if parent.attrs.get("gen_ai.operation.name") == "invoke_agent":
            name = parent.attrs.get("gen_ai.agent.name") or parent.name.removeprefix("invoke_agent").strip()
            if name:
                return str(name)
        parent, hops = by_id.get(parent.parent_id), hops + 1
    return str(span.attrs.get("gen_ai.agent.name") or span.resource.get("service.name") or "default")


def _genai_parts(attrs: dict[str, Any]) -> tuple[list[Part], str, str]:
    """Parts from the GenAI conventions' opt-in content attributes; and the system and tools text."""
    parts: list[Part] = []
    system = _structured(attrs.get("gen_ai.system_instructions"))
    system_text = text_of(_texts(system)) if system is not None else ""
    if system_text:
        parts.append(Part(role="system", text=system_text, segment="system", source="gen_ai.system_instructions"))
    tools = _structured(attrs.get("gen_ai.tool.definitions"))
    tool_lines = []
    for index, tool in enumerate(tools if isinstance(tools, list) else []):
        line = canonical_json(tool)
        tool_lines.append(line)
        parts.append(Part(role="tools", text=line, segment="tools", source=f"gen_ai.tool.definitions[{index}]"))
    messages = _structured(attrs.get("gen_ai.input.messages"))
    for m_index, message in enumerate(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            continue
        role = str(message.get("role") or "user")
        for p_index, part in enumerate(message.get("parts") or []):
            if not isinstance(part, dict):
                continue
            source = f"gen_ai.input.messages[{m_index}].parts[{p_index}]"
            kind = part.get("type")
            if kind == "tool_call":
                parts.append(Part(role="assistant", text=canonical_json({"name": part.get("name"),
                                                                         "arguments": part.get("arguments")}),
                                  group=_opt_str(part.get("id")), source=source))
            elif kind == "tool_call_response":
                parts.append(Part(role="tool", text=text_of(part.get("response")), group=_opt_str(part.get("id")),
                                  source=source))
            else:
                text = part.get("content") if "content" in part else part
                parts.append(Part(role="system" if role == "system" else ("tool" if role == "tool" else role),
                                  text=text_of(text), source=source,
                                  segment="system" if role == "system" else None))
    return parts, system_text, "\n".join(tool_lines)


def _texts(value: Any) -> Any:
    """System instructions as a list of parts ``[{type: text, content}]`` -> their texts."""
    if isinstance(value, list):
        return "\n".join(text_of(v.get("content")) if isinstance(v, dict) else text_of(v) for v in value)
    return value


def _opt_str(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _indexed(attrs: dict[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """OpenInference's flattened lists: ``llm.input_messages.0.message.role`` -> {0: {"message.role": ...}}."""
    out: dict[int, dict[str, Any]] = defaultdict(dict)
    for key, value in attrs.items():
        if key.startswith(prefix):
            index, _, rest = key[len(prefix):].partition(".")
            if index.isdigit():
                out[int(index)][rest] = value
    return dict(sorted(out.items()))


def _openinference_parts(attrs: dict[str, Any]) -> tuple[list[Part], str, str]:
    parts: list[Part] = []
    system_lines, tool_lines = [], []
    for index, tool in _indexed(attrs, "llm.tools.").items():
        line = canonical_json(_structured(tool.get("tool.json_schema")))
        tool_lines.append(line)
        parts.append(Part(role="tools", text=line, segment="tools", source=f"llm.tools.{index}"))
    for index, m in _indexed(attrs, "llm.input_messages.").items():
        role = str(m.get("message.role") or "user")
        text = m.get("message.content")
        if text is None:
            text = "\n".join(str(v) for k, v in sorted(m.items()) if k.endswith("message_content.text"))
        source = f"llm.input_messages.{index}"
        calls = {k: v for k, v in m.items() if k.startswith("message.tool_calls.")}
        if role == "system":
            system_lines.append(text_of(text))
            parts.append(Part(role="system", text=text_of(text), segment="system", source=source))
        elif role == "tool":
            parts.append(Part(role="tool", text=text_of(text), group=_opt_str(m.get("message.tool_call_id")),
                              source=source))
        else:
            if text:
                parts.append(Part(role=role, text=text_of(text), source=source))
            for c_index, call in _indexed(calls, "message.tool_calls.").items():
                parts.append(Part(role="assistant", text=canonical_json({
                    "name": call.get("tool_call.function.name"),
                    "arguments": _structured(call.get("tool_call.function.arguments"))}),
                    group=_opt_str(call.get("tool_call.id")), source=f"{source}.tool_calls.{c_index}"))
    return parts, "\n".join(system_lines), "\n".join(tool_lines)


def manifest_of(span: SpanView, agent: str) -> Manifest:
    a = span.attrs
    provider = str(a.get("gen_ai.provider.name") or a.get("gen_ai.system") or a.get("llm.provider")
                   or a.get("llm.system") or "")
    model = str(a.get("gen_ai.response.model") or a.get("gen_ai.request.model") or a.get("llm.model_name")
                or "unknown")
    if any(k.startswith("llm.input_messages.") or k.startswith("llm.tools.") for k in a):
        parts, system_text, tools_text = _openinference_parts(a)
    else:
        parts, system_text, tools_text = _genai_parts(a)
    # Cache order: Anthropic caches tools before system; the others read system first.
    order = ("tools", "system") if provider.startswith("anthropic") else ("system", "tools")
    texts = {"system": system_text, "tools": tools_text}
    segments = [(name, texts[name]) for name in order if texts[name]]
    finish = a.get("gen_ai.response.finish_reasons")
    finish_reason = str(finish[0]) if isinstance(finish, list) and finish else (str(finish) if finish else None)
    error = span.status_code == 2 or bool(a.get("error.type"))
    outcome = Outcome(status="error" if error else "ok", finish_reason=finish_reason)
    max_tokens = a.get("gen_ai.request.max_tokens")
    warnings = [f"error: {a.get('error.type') or ''} {span.status_message}".strip()] if error else []
    mapped = call_manifest(
        call_id=span.call_id,
        run_id=str(a.get("gen_ai.conversation.id") or a.get("session.id") or span.trace_id),
        step=0,
        model=model,
        provider=provider,
        agent=agent,
        started_at=span.start,
        ended_at=span.end,
        parts=parts,
        segments=segments,
        usage=normalize_usage(a, "otel"),
        output_reserve=int(max_tokens) if isinstance(max_tokens, int | float) else 0,
        outcome=outcome,
        warnings=warnings,
        builder=BUILDER,
    )
    mapped.workspace = _workspace(span)
    return mapped


def _workspace(span: SpanView) -> Workspace | None:
    """Where the agent worked, by OpenTelemetry's semantic conventions, on the span or its resource:
    ``process.working_directory``, and ``vcs.ref.head.name`` when ``vcs.ref.type`` does not say it
    is a tag."""

    def text(name: str) -> str:
        value = span.attrs.get(name, span.resource.get(name))
        return value if isinstance(value, str) else ""

    branch = text("vcs.ref.head.name") if text("vcs.ref.type") in ("", "branch") else ""
    return workspace_of(text("process.working_directory"), branch)


def map_export(project: Project, request: ExportTraceServiceRequest) -> MappedExport:
    """Manifests of the request's inference spans that are not stored yet, steps assigned."""
    spans = spans_of(request)
    out = MappedExport(spans=len(spans))
    valid = []
    for span in spans:
        bad = invalid_ids(span)
        if bad is None:
            valid.append(span)
        else:
            out.rejected.append(f"span {span.span_id[:40] or '(no id)'}: invalid ids: {bad}")
    spans = valid
    by_id = {s.span_id: s for s in spans}
    candidates: dict[str, tuple[SpanView, Any]] = {}
    for span in spans:
        embedded = _embedded_manifest(span)
        if embedded is None and not _is_inference(span):
            out.ignored += 1
            continue
        call_id = span.call_id
        if embedded is not None:
            raw = embedded.encode() if isinstance(embedded, str) else msgspec.json.encode(embedded)
            manifest, errors, _ = door.validate(raw)
            if manifest is None:
                detail = "; ".join(f"{e.path}: {e.message}" for e in errors[:3])
                out.rejected.append(f"span {span.span_id}: {MANIFEST_ATTRIBUTE} is not a valid manifest: {detail}")
                continue
            candidates[manifest.call_id] = (span, manifest)
        else:
            candidates.setdefault(call_id, (span, None))
    # The registry of stored call ids (one unpartitioned unique index), not the calls table
    # probed in every day's partition (PostgreSQL).
    stored = set(CallKey.objects.filter(project=project, call_key__in=list(candidates))
                 .values_list("call_key", flat=True))
    fresh: list[Manifest] = []
    for call_id, (span, embedded) in candidates.items():
        if call_id in stored:
            continue  # re-export: already stored, nothing to do
        if embedded is not None:
            fresh.append(embedded)
            continue
        try:
            fresh.append(manifest_of(span, _agent(span, by_id)))
        except (ValueError, TypeError, msgspec.ValidationError) as exc:
            out.rejected.append(f"span {span.span_id}: cannot map to a manifest: {exc}")
    out.manifests = _with_steps(project, fresh)
    return out


def _with_steps(project: Project, manifests: list[Manifest]) -> list[Manifest]:
    """Mapped spans get the next steps of their run, in start order; embedded manifests keep theirs."""
    mapped = [m for m in manifests if m.builder is BUILDER]
    if not mapped:
        return manifests
    runs = list(Run.objects.filter(project=project, run_id__in={m.run_id for m in mapped})
                .values_list("pk", "run_id", "first_seen", "last_seen"))
    last: dict[str, int] = {}
    if runs:
        # Bounded by the runs' first and last seen times: only their days' partitions are read.
        names = {pk: run_id for pk, run_id, _, _ in runs}
        days = {"started_at__gte": min(r[2] for r in runs), "started_at__lte": max(r[3] for r in runs)}
        last = {names[pk]: step for pk, step in Call.objects.filter(run_id__in=names, **days).values("run_id")
                .annotate(last=Max("step")).values_list("run_id", "last")}
    for m in sorted(mapped, key=lambda m: (m.started_at, m.call_id)):
        step = last.get(m.run_id)
        m.step = 0 if step is None else step + 1
        last[m.run_id] = m.step
    return manifests
