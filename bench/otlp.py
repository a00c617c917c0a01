"""OTLP ingest throughput as a ratio to native manifest ingest, in the same run.

    .venv/bin/python bench/otlp.py [--spans 2000] [--batch 200] [--workers 2]

Starts a real server (gunicorn) on a scratch PostgreSQL database (``<name>_bench_otlp`` for
DATABASE_URL=.../<name>, else ``ctxview_bench_otlp``), then:
1. native: posts the manifests that the OTLP mapping makes of the spans (gzip JSON,
   ``POST /api/v1/manifests``) and reports manifests/s;
2. OTLP: posts the same calls as GenAI inference spans (gzip protobuf, as the
   Python OTLP/HTTP exporter sends them, ``POST /v1/traces``) and reports spans/s;
and prints OTLP spans/s / native manifests/s (the two run in interleaved halves);
3. the same two paths in process (the services the views call, no HTTP), for comparison. Each span
carries system instructions, four tool definitions and a ten-message conversation (15 items). Analysis is handed to
Redis (no worker consumes the scratch queue), as in production.

Not a test: figures vary with the machine; the ratio is what to compare.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.support import (
    PG,
    Processes,
    create_database,
    create_key,
    drop_database,
    scratch_database_name,
)

DB = scratch_database_name("otlp", "ctxview_bench_otlp")
SYSTEM = "\n".join(f"Rule {n}: answer with the order id and never promise refunds above 200 EUR." for n in range(40))
TOOLS = [{"type": "function", "name": f"tool_{n}", "description": "Look something up",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}} for n in range(4)]


def messages(n: int) -> list[dict]:
    out = [{"role": "user", "parts": [{"type": "text", "content": f"Ticket {n}: where is my parcel?"}]}]
    for k in range(4):
        out.append({"role": "assistant", "parts": [{"type": "tool_call", "id": f"c{k}", "name": f"tool_{k}",
                                                    "arguments": {"q": f"order {n}"}}]})
        out.append({"role": "tool", "parts": [{"type": "tool_call_response", "id": f"c{k}",
                                               "response": f"order {n}: shipped, status {k} " * 10}]})
    out.append({"role": "user", "parts": [{"type": "text", "content": "Please hurry."}]})
    return out


def export_bodies(spans: int, batch: int, trace_prefix: str) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

    def kv(key: str, value) -> KeyValue:
        if isinstance(value, int):
            return KeyValue(key=key, value=AnyValue(int_value=value))
        return KeyValue(key=key, value=AnyValue(string_value=value))

    system, tools = json.dumps([{"type": "text", "content": SYSTEM}]), json.dumps(TOOLS)
    t0 = 1764410400 * 10**9
    bodies = []
    for start in range(0, spans, batch):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.append(kv("service.name", "bench-agent"))
        scope = rs.scope_spans.add()
        for n in range(start, min(start + batch, spans)):
            span = scope.spans.add(trace_id=bytes.fromhex(f"{trace_prefix}{n // 20:024x}"),
                                   span_id=n.to_bytes(8, "big"), name="chat gpt-4o", kind=3,
                                   start_time_unix_nano=t0 + n * 10**9, end_time_unix_nano=t0 + n * 10**9 + 8 * 10**8)
            span.attributes.extend([
                kv("gen_ai.operation.name", "chat"), kv("gen_ai.provider.name", "openai"),
                kv("gen_ai.request.model", "gpt-4o"), kv("gen_ai.usage.input_tokens", 3000),
                kv("gen_ai.usage.output_tokens", 200), kv("gen_ai.usage.cache_read.input_tokens", 1024),
                kv("gen_ai.system_instructions", system), kv("gen_ai.tool.definitions", tools),
                kv("gen_ai.input.messages", json.dumps(messages(n))),
            ])
        bodies.append(gzip.compress(request.SerializeToString()))
    return bodies


def native_bodies(otlp_bodies: list[bytes]) -> tuple[list[bytes], int]:
    """The manifests the mapping makes of the same spans (other trace ids, so nothing is a duplicate)."""
    import msgspec
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from manifests.ingest import otlp

    bodies, items = [], 0
    for body in otlp_bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(gzip.decompress(body))
        manifests = []
        for index, span in enumerate(otlp.spans_of(request)):
            m = otlp.manifest_of(span, "bench-agent")
            m.step = index % 20
            items += len(m.items)
            manifests.append(m)
        bodies.append(gzip.compress(msgspec.json.encode({"manifests": manifests})))
    return bodies, items


def post_all(port: int, key: str, path: str, content_type: str, bodies: list[bytes]) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    start = time.perf_counter()
    for body in bodies:
        conn.request("POST", path, body, {"Authorization": f"Bearer {key}", "Content-Type": content_type,
                                          "Content-Encoding": "gzip"})
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise SystemExit(f"{path} failed: {response.status} {payload[:300]!r}")
    return time.perf_counter() - start


def in_process_seconds(spans: int, batch: int) -> tuple[float, float]:
    """The two ingest paths without HTTP (the services the views call), on other trace ids."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from manifests import ingest
    from manifests.ingest import otlp
    from manifests.models import Project

    project = Project.objects.get(name="bench")
    natives, _ = native_bodies(export_bodies(spans, batch, "c" * 8))
    exports = export_bodies(spans, batch, "d" * 8)
    native_s = otlp_s = 0.0
    for native, export in zip(natives, exports):
        start = time.perf_counter()
        ingest.ingest_body(project=project, body=gzip.decompress(native))
        native_s += time.perf_counter() - start
        start = time.perf_counter()
        request = ExportTraceServiceRequest()
        request.ParseFromString(gzip.decompress(export))
        ingest.ingest_manifests(project=project, manifests=otlp.map_export(project, request).manifests)
        otlp_s += time.perf_counter() - start
    return native_s, otlp_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", "8161")))
    args = parser.parse_args()

    env = dict(os.environ, DATABASE_URL=f"{PG}/{DB}", SECRET_KEY="bench", DEBUG="0", ALLOWED_HOSTS="127.0.0.1",
               REDIS_URL=os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/6"))
    import psycopg

    create_database(DB, env)
    key = create_key(env, "bench", can_read=False)

    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxview.settings")
    import django

    django.setup()
    otlp_bodies = export_bodies(args.spans, args.batch, "a" * 8)
    natives, items = native_bodies(export_bodies(args.spans, args.batch, "b" * 8))

    processes = Processes(env, Path(f"/tmp/ctxview-otlp-{args.port}"))
    try:
        processes.web(args.port, workers=args.workers, log_level="warning")
        # Interleaved halves, so warm-up and a busy neighbour weigh on both paths alike.
        half = len(natives) // 2
        native_s = otlp_s = 0.0
        for part in (slice(0, half), slice(half, None)):
            native_s += post_all(args.port, key, "/api/v1/manifests", "application/json", natives[part])
            otlp_s += post_all(args.port, key, "/v1/traces", "application/x-protobuf", otlp_bodies[part])
        in_process = in_process_seconds(args.spans, args.batch)
        with psycopg.connect(f"{PG}/{DB}") as conn:
            stored = conn.execute("SELECT count(*) FROM manifests_call").fetchone()
            stored_items = conn.execute("SELECT count(*) FROM manifests_item").fetchone()[0]
    finally:
        processes.stop_all()
        subprocess.run(["redis-cli", "-u", env["REDIS_URL"], "flushdb"], capture_output=True)
        from django.db import connections

        connections.close_all()
        drop_database(DB)

    print(f"machine: {os.cpu_count()} cores; {args.spans} calls of {items / args.spans:.0f} items, "
          f"batches of {args.batch}, gunicorn x{args.workers}, PostgreSQL")
    print(f"native  POST /api/v1/manifests (gzip JSON):    {args.spans / native_s:8.0f} manifests/s")
    print(f"OTLP    POST /v1/traces (gzip protobuf spans): {args.spans / otlp_s:8.0f} spans/s")
    print(f"stored: {stored[0]} calls, {stored_items} items (expected {4 * args.spans} calls, {4 * items} items)")
    if stored[0] != 4 * args.spans or stored_items != 4 * items:
        raise SystemExit("not everything was stored: the figures above are meaningless")
    print(f"ratio OTLP / native over HTTP: {native_s / otlp_s:.2f}")
    print(f"in process (ingest services, no HTTP): native {args.spans / in_process[0]:.0f} manifests/s, "
          f"OTLP {args.spans / in_process[1]:.0f} spans/s, ratio {in_process[0] / in_process[1]:.2f}")


if __name__ == "__main__":
    main()
