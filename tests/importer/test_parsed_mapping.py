"""Each agent's reader hands the proxy's mapping parsed requests whose repeated objects are read once
(ctxkit.proxy.capture.ParsedRequests): the demo's real transcripts of every CLI map to the same
manifests as their requests sent as bytes, as the proxy sees them."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from ctxkit.importer.sessions import SOURCES, exchange_of
from ctxkit.proxy.capture import Capture

TRANSCRIPTS = Path(__file__).resolve().parents[2] / "manifests" / "demo" / "transcripts"


@pytest.mark.parametrize("name", ["claude-code", "codex", "gemini"])
def test_it_maps_every_call_of_a_real_transcript_as_its_request_sent_as_bytes(name: str) -> None:
    source = SOURCES[name]
    parsed, as_bytes = Capture(None), Capture(None)
    compared = 0
    for path in source.files(str(TRANSCRIPTS / name), ""):
        for call, _end in source.calls(path, 0, []):
            exchange = exchange_of(source, call)
            from_parsed = parsed.build(exchange, call_id=f"{call.session}-{call.key}")
            exchange.request_body, exchange.request = json.dumps(call.request).encode(), None
            from_bytes = as_bytes.build(exchange, call_id=f"{call.session}-{call.key}")
            assert from_parsed is not None and from_bytes is not None
            assert msgspec.json.decode(msgspec.json.encode(from_parsed)) == \
                msgspec.json.decode(msgspec.json.encode(from_bytes)), (path, call.key)
            compared += 1
    assert compared >= 3
    assert len(parsed.parsed.history) > 0  # the parsed path read its entries through the memo
