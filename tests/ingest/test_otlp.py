"""OTLP/HTTP ingest at /v1/traces, driven by the real opentelemetry-sdk and OTLP/HTTP exporter
(protobuf) and by the SDK's own OTLP encoder posting OTLP/JSON, against a live server."""

from __future__ import annotations

import base64
import gzip
import json
import urllib.request
from collections.abc import Sequence

import pytest
from google.protobuf import json_format
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from manifests import analysis
from manifests.models import CacheEvent, Call, Item
from tests.support import manifest

# Above Anthropic's 1024-token cache minimum, with a timestamp on line 2.
SYSTEM = "You are the refund analyst.\nCurrent time: {time}\n" + "\n".join(
    f"Rule {n}: refunds over 500 EUR need a second approver." for n in range(100))
TOOLS = [{"type": "function", "name": "bi_query", "description": "Query the BI warehouse",
          "parameters": {"type": "object", "properties": {"sql": {"type": "string"}}}}]


class JsonExporter(SpanExporter):
    """OTLP/JSON over HTTP with gzip: the SDK's own OTLP encoder, ids as hex, enums as integers."""

    def __init__(self, endpoint: str, key: str) -> None:
        self.endpoint, self.key = endpoint, key

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        body = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        for rs in body.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    for k in ("traceId", "spanId", "parentSpanId"):
                        if k in span:
                            span[k] = base64.b64decode(span[k]).hex()
        request = urllib.request.Request(self.endpoint, data=gzip.compress(json.dumps(body).encode()), headers={
            "Content-Type": "application/json", "Content-Encoding": "gzip", "Authorization": f"Bearer {self.key}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            self.last = json.loads(response.read() or b"{}")
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _exporter(kind: str, url: str, key: str) -> SpanExporter:
    if kind == "protobuf":
        return OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers={"Authorization": f"Bearer {key}"},
                                compression=Compression.Gzip, timeout=10)
    return JsonExporter(f"{url}/v1/traces", key)


def _chat(tracer, *, time: str, read: int, conversation: str | None = None) -> None:
    attrs = {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5", "gen_ai.request.max_tokens": 1024,
        "gen_ai.usage.input_tokens": 2000, "gen_ai.usage.output_tokens": 120,
        "gen_ai.usage.cache_read.input_tokens": read, "gen_ai.usage.cache_creation.input_tokens": 0,
        "gen_ai.response.finish_reasons": ["end_turn"],
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": SYSTEM.format(time=time)}]),
        "gen_ai.tool.definitions": json.dumps(TOOLS),
        "gen_ai.input.messages": json.dumps([
            {"role": "user", "parts": [{"type": "text", "content": "Why did refunds rise in week 47?"}]},
            {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": "bi_query",
                                             "arguments": {"sql": "select 1"}}]},
            {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1",
                                        "response": "error=HTTP 429 Too Many Requests"}]},
            {"role": "user", "parts": [{"type": "text", "content": "Summarise for finance."}]},
        ]),
    }
    if conversation:
        attrs["gen_ai.conversation.id"] = conversation
    with tracer.start_as_current_span("chat claude-sonnet-4-5", attributes=attrs):
        pass


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_it_turns_inference_spans_from_the_real_exporter_into_calls(live_server, key, project, encoding):
    provider = TracerProvider(resource=Resource.create({"service.name": "support-bot"}))
    exporter = _exporter(encoding, live_server.url, key)
    memory = InMemorySpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")

    with tracer.start_as_current_span("invoke_agent refund-agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "refund-agent",
            "gen_ai.usage.input_tokens": 4000, "gen_ai.usage.output_tokens": 240}):  # totals: not summed again
        _chat(tracer, time="12:47", read=0, conversation="conv-7")
        with tracer.start_as_current_span("execute_tool bi_query", attributes={
                "gen_ai.operation.name": "execute_tool"}):
            pass
        _chat(tracer, time="12:48", read=0, conversation="conv-7")
    # An OpenInference LLM span with the older token names, outside any agent span.
    with tracer.start_as_current_span("ChatCompletion", attributes={
            "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "llm.provider": "openai",
            "llm.token_count.prompt": 1500, "llm.token_count.completion": 40,
            "llm.token_count.prompt_details.cache_read": 1024,
            "llm.input_messages.0.message.role": "system", "llm.input_messages.0.message.content": "Be brief.",
            "llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": "Hello"}):
        pass
    with tracer.start_as_current_span("GET /health"):
        pass
    assert provider.force_flush(10_000)

    calls = list(Call.objects.filter(project=project).order_by("started_at"))
    assert len(calls) == 3  # the agent, tool and HTTP spans are not calls
    first, second, oi = calls
    spans = {s.name: s for s in memory.get_finished_spans()}
    assert first.run.run_id == "conv-7" and (first.step, second.step) == (0, 1)
    assert first.agent == "refund-agent" and oi.agent == "support-bot"
    trace = format(spans["ChatCompletion"].context.trace_id, "032x")
    assert oi.run.run_id == trace and oi.call_id == f"{trace}-{spans['ChatCompletion'].context.span_id:016x}"
    assert (first.model, first.provider, first.output_reserve) == ("claude-sonnet-4-5", "anthropic", 1024)
    assert (first.input_tokens, first.cache_read_tokens, first.output_tokens) == (2000, 0, 120)
    assert (oi.input_tokens, oi.cache_read_tokens, oi.model, oi.provider) == (1500, 1024, "gpt-4o", "openai")
    assert sum(c.input_tokens for c in calls) == 5500  # the agent span's 4000 is not added
    assert first.ended_at >= first.started_at

    items = list(Item.objects.filter(call=first).order_by("ordinal"))
    assert [i.kind for i in items] == ["system", "tools", "task", "history", "tool_result", "user"]
    assert items[3].group == items[4].group == "call_1" and items[4].trust == "untrusted"
    assert all(i.used_tokens and i.used_tokens > 0 for i in items)
    assert "429" in items[4].text
    assert [s["name"] for s in first.prefix_segments] == ["tools", "system"]
    system_before, system_after = first.prefix_segments[1], second.prefix_segments[1]
    assert system_before["lines"][1] != system_after["lines"][1]
    assert system_before["lines"][0] == system_after["lines"][0] and system_after["text"].split("\n")[1] == \
        "Current time: 12:48"
    assert first.prefix_hash != second.prefix_hash

    analysis.analyze_calls([c.pk for c in calls])
    event = CacheEvent.objects.get(call=second)
    assert event.cause == CacheEvent.PREFIX_CHANGED and event.changed_segment == "system"

    # Re-export of the very same spans: nothing is stored twice.
    finished = memory.get_finished_spans()
    before = (Call.objects.count(), Item.objects.count())
    assert exporter.export(finished) == SpanExportResult.SUCCESS
    assert (Call.objects.count(), Item.objects.count()) == before
    provider.shutdown()


def _post(client, body: bytes, content_type: str = "application/x-protobuf", **headers):
    return client.post("/v1/traces", data=body, content_type=content_type, **headers)


@pytest.mark.django_db
def test_it_answers_bad_exports_as_the_otlp_spec_says(client, key, settings):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    r = _post(client, b"\xff\x00not protobuf", **auth)
    assert r.status_code == 400 and r["Content-Type"] == "application/x-protobuf"
    status = Status()
    status.ParseFromString(r.content)
    assert "ExportTraceServiceRequest" in status.message
    r = _post(client, b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
              "application/json", **auth)
    assert r.status_code == 400 and "hex" in r.json()["message"]
    assert _post(client, b"{}", "text/plain", **auth).status_code == 415
    assert _post(client, b"{}", "application/json", HTTP_CONTENT_ENCODING="br", **auth).status_code == 415
    assert _post(client, b"{}", "application/json").status_code == 401
    assert _post(client, b"{}", "application/json", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    settings.CTXVIEW_MAX_BODY_BYTES = 1024
    assert _post(client, b"{" + b" " * 2000 + b"}", "application/json", **auth).status_code == 413
    assert _post(client, gzip.compress(b"{" + b" " * 5000 + b"}"), "application/json",
                 HTTP_CONTENT_ENCODING="gzip", **auth).status_code == 413
    settings.CTXVIEW_MAX_BODY_BYTES = 10_000_000
    settings.CTXVIEW_OTLP_MAX_CONCURRENT = 0
    r = _post(client, b"{}", "application/json", **auth)
    assert r.status_code == 429 and r["Retry-After"] == "1"


def _span(span_id: str, **attributes) -> dict:
    def value(v):
        if isinstance(v, bool):
            return {"boolValue": v}
        if isinstance(v, int):
            return {"intValue": str(v)}
        return {"stringValue": v}
    return {"traceId": "ab" * 16, "spanId": span_id, "name": "s", "startTimeUnixNano": "1764410400000000000",
            "endTimeUnixNano": "1764410401000000000",
            "attributes": [{"key": k, "value": value(v)} for k, v in attributes.items()]}


def _export(*spans: dict) -> bytes:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": list(spans)}]}]}
                      ).encode()


@pytest.mark.django_db
def test_it_stores_a_span_carrying_a_ctxview_manifest_as_that_manifest(client, key, project):

    embedded = manifest("native-1", run_id="native-run", step=4)
    bad = manifest("native-2")
    bad["usage"]["cache_read_tokens"] = 10**6
    r = _post(client, _export(_span("01" * 8, **{"ctxview.manifest": json.dumps(embedded)}),
                              _span("02" * 8, **{"ctxview.manifest": json.dumps(bad)})),
              "application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 200
    assert r.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert "cache_read_tokens" in r.json()["partialSuccess"]["errorMessage"]
    call = Call.objects.get(project=project, call_id="native-1")
    assert (call.step, call.run.run_id, call.item_count) == (4, "native-run", len(embedded["items"]))
    assert not Call.objects.filter(call_id="native-2").exists()


@pytest.mark.django_db
def test_it_counts_and_ignores_unknown_spans_and_survives_odd_attributes(client, key, project):
    r = _post(client, _export(
        _span("01" * 8, **{"http.method": "GET"}),
        _span("02" * 8, **{"gen_ai.operation.name": "invoke_agent"}),
        _span("03" * 8, **{"gen_ai.operation.name": "chat", "gen_ai.input.messages": "not json {",
                           "gen_ai.tool.definitions": "42", "gen_ai.usage.input_tokens": "12",
                           "gen_ai.usage.cache_read_input_tokens": 30, "gen_ai.request.max_tokens": "x"}),
    ), "application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 200, r.content
    partial = r.json()["partialSuccess"]
    assert "rejectedSpans" not in partial and partial["errorMessage"].startswith("2 of 3 spans ignored")
    call = Call.objects.get(project=project)
    # An older instrumentation copied the uncached input: cache parts are added, never negative.
    assert (call.input_tokens, call.cache_read_tokens) == (42, 30)
    assert call.warnings and call.warnings[0].startswith("window assumed")  # no model: said so
    response = ExportTraceServiceResponse()
    empty = ExportTraceServiceRequest()
    empty.resource_spans.add()  # a resource without spans is a valid export
    r = _post(client, empty.SerializeToString(), HTTP_AUTHORIZATION=f"Bearer {key}")
    response.ParseFromString(r.content)
    assert r.status_code == 200 and response.partial_success.rejected_spans == 0


def _protobuf_span(spans, trace_id: bytes, span_id: bytes, name: str, parent: bytes = b"") -> None:
    span = spans.add()
    span.trace_id, span.span_id, span.parent_span_id, span.name = trace_id, span_id, parent, name
    span.start_time_unix_nano, span.end_time_unix_nano = 1764410400000000000, 1764410401000000000
    for k, v in (("gen_ai.operation.name", "chat"), ("gen_ai.request.model", "claude-sonnet-4-5")):
        attribute = span.attributes.add()
        attribute.key, attribute.value.string_value = k, v


@pytest.mark.django_db
def test_it_rejects_and_counts_spans_with_invalid_trace_or_span_ids(client, key, project):
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    good_trace, good_span = bytes.fromhex("ab" * 16), bytes.fromhex("01" * 8)
    _protobuf_span(spans, good_trace, good_span, "valid")
    _protobuf_span(spans, bytes.fromhex("abcd"), bytes.fromhex("02" * 8), "2-byte trace id")
    _protobuf_span(spans, bytes(16), bytes.fromhex("03" * 8), "all-zero trace id")
    _protobuf_span(spans, good_trace, bytes(8), "all-zero span id")
    _protobuf_span(spans, good_trace, bytes.fromhex("05" * 4), "4-byte span id")
    _protobuf_span(spans, good_trace, b"", "no span id")
    _protobuf_span(spans, good_trace, bytes.fromhex("07" * 8), "3-byte parent", parent=bytes.fromhex("99" * 3))
    r = _post(client, request.SerializeToString(), HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 200, r.content
    response = ExportTraceServiceResponse()
    response.ParseFromString(r.content)
    assert response.partial_success.rejected_spans == 6
    message = response.partial_success.error_message
    assert "trace id 'abcd' is 2 bytes, not 16" in message and "trace id is all zeros" in message
    assert [c.call_id for c in Call.objects.filter(project=project)] == [f"{'ab' * 16}-{'01' * 8}"]

    # OTLP/JSON's hex ids are checked the same way.
    r = _post(client, _export(_span("0000000000000000", **{"gen_ai.operation.name": "chat"}),
                              {**_span("02" * 8, **{"gen_ai.operation.name": "chat"}), "traceId": "abcd"}),
              "application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
    assert r.status_code == 200 and r.json()["partialSuccess"]["rejectedSpans"] == "2"
    assert "span id is all zeros" in r.json()["partialSuccess"]["errorMessage"]
    assert Call.objects.filter(project=project).count() == 1
