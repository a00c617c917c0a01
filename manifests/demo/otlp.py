"""The demo's OTLP run: a support-triage agent instrumented with OpenTelemetry only (no ctxkit).

Its spans are built as an OTel SDK would export them (an ``invoke_agent`` span around four
``chat`` spans and an ``execute_tool`` span, GenAI attributes with opt-in content) and go
through the OTLP mapping and the ingest service, the same path as ``POST /v1/traces``.
Trace and span ids are fixed, so loading the demo again stores nothing twice.
Called from the seed_demo command.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from manifests import ingest
from manifests.ingest import otlp
from manifests.models import Project

TRACE_ID = bytes.fromhex("5e1f0c7a" * 4)
CONVERSATION = "otlp-support-triage"
SYSTEM = "\n".join([
    "You are the support triage agent of an online shop.",
    "Classify each ticket as refund, delivery, account or other, and draft a first answer.",
    "Never promise a refund above 200 EUR without a human approval.",
    *[f"Policy {n}: quote the order id and the ticket id in every answer; keep answers under 120 words."
      for n in range(1, 60)],
])
TOOLS = [
    {"type": "function", "name": "order_lookup", "description": "Look up an order by id",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
    {"type": "function", "name": "kb_search", "description": "Search the help-centre articles",
     "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
]
TURNS = [
    ("user", "Ticket T-8812: my parcel for order 55-1207 never arrived, I want my money back."),
    ("tool", "order_lookup", {"order_id": "55-1207"},
     "order 55-1207: 89.90 EUR, shipped 2026-11-21, carrier status: lost in transit"),
    ("tool", "kb_search", {"query": "lost parcel refund"},
     "Article 204: a parcel lost in transit is refunded in full after the carrier confirms the loss."),
    ("user", "Also, can you change the e-mail address on my account?"),
]


def _kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        any_value = AnyValue(bool_value=value)
    elif isinstance(value, int):
        any_value = AnyValue(int_value=value)
    elif isinstance(value, list):
        any_value = AnyValue()
        any_value.array_value.values.extend(AnyValue(string_value=str(v)) for v in value)
    else:
        any_value = AnyValue(string_value=str(value))
    return KeyValue(key=key, value=any_value)


def _nanos(at: datetime) -> int:
    return int(at.timestamp() * 1e9)


def _messages(step: int) -> list[dict[str, Any]]:
    """The input messages of chat call ``step``: the turns so far, tool calls with their results."""
    messages: list[dict[str, Any]] = []
    for index, turn in enumerate(TURNS[: step + 1]):
        if turn[0] == "user":
            messages.append({"role": "user", "parts": [{"type": "text", "content": turn[1]}]})
        else:
            _, name, arguments, result = turn
            call_id = f"call_{index}"
            messages.append({"role": "assistant", "parts": [
                {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}]})
            messages.append({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": call_id, "response": result}]})
    return messages


def export_request(now: datetime) -> ExportTraceServiceRequest:
    start = now - timedelta(minutes=25)
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.extend([_kv("service.name", "support-bot"), _kv("service.version", "3.2.0")])
    scope = rs.scope_spans.add()
    scope.scope.name = "opentelemetry.instrumentation.openai_v2"
    agent_id = bytes.fromhex("a0" * 8)
    agent = scope.spans.add(trace_id=TRACE_ID, span_id=agent_id, name="invoke_agent support-triage", kind=1,
                            start_time_unix_nano=_nanos(start),
                            end_time_unix_nano=_nanos(start + timedelta(seconds=40)))
    agent.attributes.extend([_kv("gen_ai.operation.name", "invoke_agent"), _kv("gen_ai.agent.name", "support-triage"),
                             _kv("gen_ai.usage.input_tokens", 9000), _kv("gen_ai.usage.output_tokens", 600)])
    for step in range(len(TURNS)):
        at = start + timedelta(seconds=1 + 9 * step)
        read = 0 if step == 0 else 1280  # the stable system + tools prefix is read from the cache
        span = scope.spans.add(trace_id=TRACE_ID, span_id=bytes.fromhex(f"c{step:x}" * 8), parent_span_id=agent_id,
                               name="chat gpt-4o", kind=3, start_time_unix_nano=_nanos(at),
                               end_time_unix_nano=_nanos(at + timedelta(milliseconds=1800 + 150 * step)))
        span.attributes.extend([
            _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.provider.name", "openai"),
            _kv("gen_ai.request.model", "gpt-4o"), _kv("gen_ai.response.model", "gpt-4o-2024-08-06"),
            _kv("gen_ai.conversation.id", CONVERSATION), _kv("gen_ai.request.max_tokens", 800),
            _kv("gen_ai.usage.input_tokens", 1700 + 140 * step), _kv("gen_ai.usage.output_tokens", 90 + 10 * step),
            _kv("gen_ai.usage.cache_read.input_tokens", read),
            _kv("gen_ai.response.finish_reasons", ["tool_calls" if step in (0, 1) else "stop"]),
            _kv("gen_ai.system_instructions", json.dumps([{"type": "text", "content": SYSTEM}])),
            _kv("gen_ai.tool.definitions", json.dumps(TOOLS)),
            _kv("gen_ai.input.messages", json.dumps(_messages(step))),
        ])
        if step in (1, 2):
            tool = scope.spans.add(trace_id=TRACE_ID, span_id=bytes.fromhex(f"d{step:x}" * 8),
                                   parent_span_id=agent_id, name=f"execute_tool {TURNS[step][1]}", kind=1,
                                   start_time_unix_nano=_nanos(at - timedelta(seconds=1)),
                                   end_time_unix_nano=_nanos(at - timedelta(milliseconds=400)))
            tool.attributes.extend([_kv("gen_ai.operation.name", "execute_tool"),
                                    _kv("gen_ai.tool.name", TURNS[step][1])])
    return request


def load(*, project: Project, now: datetime | None = None, analyse: bool = True) -> dict[str, int]:
    mapped = otlp.map_export(project, export_request(now or timezone.now()))
    report = ingest.ingest_manifests(project=project, manifests=mapped.manifests)
    if analyse and report.stored_call_ids:
        from manifests import analysis

        analysis.analyze_calls(report.stored_call_ids)
    return {"spans": mapped.spans, "ignored": mapped.ignored, "accepted": report.count(ingest.ACCEPTED)}
