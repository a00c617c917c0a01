"""A non-Python agent through ctxkit proxy: the official ``@anthropic-ai/sdk`` Node package
(pinned in tests/clients/node/package-lock.json, installed with ``npm ci`` when node_modules is absent)
runs tests/clients/node/agent.mjs, a call, a streamed call continuing the conversation and a 429,
straight against the stand-in provider and through the proxy. It receives the same, and the
calls reach the live ctxview server as one run."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.proxy.provider_standin import StandIn, same_ids
from tests.proxy.proxy_support import npm_ci, running_proxy

NODE_DIR = Path(__file__).resolve().parents[1] / "clients" / "node"


def _agent(base_url: str) -> dict:
    out = subprocess.run(["node", str(NODE_DIR / "agent.mjs")], env={**os.environ, "BASE_URL": base_url},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _get(live_server, key: str, path: str) -> dict:
    request = urllib.request.Request(f"{live_server.url}{path}", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.mark.django_db(transaction=True)
def test_the_node_sdk_through_the_proxy_gets_the_same_and_is_recorded_as_one_run(live_server, key, sender):
    npm_ci(NODE_DIR)
    with StandIn() as provider, running_proxy(provider.url, sender) as proxy:
        direct = _agent(provider.url)
        through = _agent(proxy.url)
        assert same_ids(through) == same_ids(direct)  # each answer has an id of its own
        assert through["events"][-1]["type"] == "message_stop" and through["error"]["status"] == 429
        deadline = time.monotonic() + 15
        while True:
            proxy.capture.flush(2)
            runs = _get(live_server, key, "/api/v1/runs")["results"]
            calls = [c for r in runs for c in _get(live_server, key, f"/api/v1/runs/{r['run_id']}/calls")["results"]]
            if len(calls) >= 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    # The 429 starts a conversation of its own (its messages extend none); the two model calls are one run.
    by_run: dict[str, list[dict]] = {}
    for c in calls:
        by_run.setdefault(c["run_id"], []).append(_get(live_server, key, f"/api/v1/calls/{c['call_id']}"))
    conversation = next(v for v in by_run.values() if len(v) == 2)
    first, streamed = sorted(conversation, key=lambda c: c["step"])
    assert (first["step"], streamed["step"]) == (0, 1)
    assert {first["agent"], streamed["agent"]} == {"Anthropic"}  # "Anthropic/JS 1.17.0"
    for c in (first, streamed):
        assert (c["input_tokens"], c["cache_read_tokens"], c["finish_reason"], c["status"]) == (
            1950, 1800, "end_turn", "ok")
    assert [i["kind"] for i in streamed["items"]] == ["system", "task", "history", "user"]
    (limited,) = [v[0] for v in by_run.values() if len(v) == 1]
    assert limited["status"] == "error" and "error: ProviderError (HTTP 429)" in limited["warnings"]
