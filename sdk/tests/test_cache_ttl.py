"""The Anthropic mapping (ctxkit.instrument and ctxkit proxy) records the prompt-cache TTL the
request's cache_control breakpoints asked for as the manifest's cache_ttl_seconds."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ctxkit.instrumentation.bodies import manifest_from_bodies
from ctxkit.providers.anthropic import cache_ttl_seconds

FIVE_MIN = {"type": "ephemeral"}
ONE_HOUR = {"type": "ephemeral", "ttl": "1h"}


def body(*, tools: Any = None, system: Any = None, last: Any = None, top: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": "claude-sonnet-4-5", "max_tokens": 100,
        "tools": [{"name": "get_logs", "input_schema": {"type": "object"},
                   **({"cache_control": tools} if tools else {})}],
        "system": [{"type": "text", "text": "Be careful.", **({"cache_control": system} if system else {})}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Why?",
                                                   **({"cache_control": last} if last else {})}]}],
    }
    if top is not None:
        out["cache_control"] = top
    return out


def recorded(request: dict[str, Any]) -> int | None:
    manifest = manifest_from_bodies("anthropic.messages", request, response={"usage": {"input_tokens": 10}},
                                    run_id="r1", step=0, started=time.time())
    return manifest.cache_ttl_seconds


@pytest.mark.parametrize("request_, ttl", [
    (body(last=FIVE_MIN), 300),  # no "ttl": Anthropic's default, 5 minutes
    (body(last={"type": "ephemeral", "ttl": "5m"}), 300),
    (body(system=ONE_HOUR), 3600),
    (body(tools=ONE_HOUR), 3600),
    (body(top=ONE_HOUR), 3600),  # automatic caching's top-level breakpoint
    (body(system=ONE_HOUR, last=FIVE_MIN), 3600),  # the longest: still readable after a pause between the two
    (body(), None),  # no breakpoint: nothing is cached, the server uses its price table
    (body(last={"type": "ephemeral", "ttl": ["1h"]}), None),  # a TTL the provider refuses is none
    (body(top="yes", last={}), None),
])
def test_the_manifest_records_the_ttl_of_the_requests_cache_control(request_, ttl):
    assert recorded(request_) == ttl
    assert cache_ttl_seconds(request_) == ttl


def test_a_message_that_is_not_an_object_is_skipped():
    assert cache_ttl_seconds({"messages": ["hi", {"role": "user", "content": "plain"}], "system": "s"}) is None
