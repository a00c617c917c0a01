"""The run view's window per step (ctxkit.breakdown): the steps of a Claude Code session
ingested through the API, one bar per step with the categories in the call view's order, each
step's calls added up, the same numbers as each call's own breakdown."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from ctxkit.breakdown import SEGMENTS, summed, window_breakdown
from ctxkit.manifest import convert_manifest
from tests.html_page import parse
from tests.views.window_support import claude_code_manifest, rows_of

pytestmark = pytest.mark.django_db


def _chart(project, member) -> dict:
    client = Client()
    client.force_login(member)
    r = client.get(f"/p/{project.slug}/runs/cc-session/")
    assert r.status_code == 200
    body = r.content.decode()
    assert 'id="chart-window"' in body and "<h2>Window per step</h2>" in body
    data = parse(body).one('script#run-data[type="application/json"]')
    return json.loads(data.text)["breakdown"]


def _breakdown(manifest: dict):
    parsed, errors = convert_manifest(manifest)
    assert parsed is not None, errors
    return window_breakdown(parsed.items, parsed.budget.window, parsed.usage.input_tokens)


def test_it_draws_the_window_by_category_per_step(api, project, member):
    manifests = [claude_code_manifest(step, input_tokens=[0, 2500, 4000][step]) for step in range(3)]
    assert api.post({"manifests": manifests}).status_code in (200, 201, 202, 207)
    chart = _chart(project, member)
    assert chart["steps"] == [0, 1, 2] and chart["order"] == list(SEGMENTS)
    assert chart["labels"]["mcp_tools"] == "MCP tools" and chart["labels"]["free"] == "Free space"
    for n, manifest in enumerate(manifests):
        own = _breakdown(manifest)
        assert {s: chart["segments"][s][n] for s in SEGMENTS} == {s: own.segment(s) for s in SEGMENTS}
    assert chart["tools"] == [2, 2, 2] and chart["mcp_tools"] == [1, 1, 1]
    # The tool results grow step by step; free space is the window less the input read.
    assert chart["segments"]["tool_results"][0] == 0 < chart["segments"]["tool_results"][1] \
        < chart["segments"]["tool_results"][2]
    assert chart["segments"]["free"][1:] == [200_000 - 2500, 200_000 - 4000]
    assert chart["urls"][2].endswith("/calls/cc-step-2/")


def test_it_adds_up_the_calls_of_one_step(api, project, member):
    first = claude_code_manifest(1, input_tokens=3000)
    second = claude_code_manifest(1, input_tokens=0)
    second["call_id"] = "cc-step-1-sub"
    assert api.post({"manifests": [first, second]}).status_code in (200, 201, 202, 207)
    chart = _chart(project, member)
    both = summed([_breakdown(first), _breakdown(second)])
    assert chart["steps"] == [1] and chart["calls"] == [2]
    assert {s: chart["segments"][s][0] for s in SEGMENTS} == {s: both.segment(s) for s in SEGMENTS}
    assert chart["mcp_tools"] == [2]


def test_it_names_each_steps_last_item_as_the_agent_does(api, project, member):
    manifests = [claude_code_manifest(step, input_tokens=0) for step in range(3)]
    assert api.post({"manifests": manifests}).status_code in (200, 201, 202, 207)
    client = Client()
    client.force_login(member)
    body = client.get(f"/p/{project.slug}/runs/cc-session/").content.decode()
    headers = [th.text for th in parse(body).select("#steps thead th")]
    column = headers.index("Last item")
    steps = rows_of(body, "steps", "data-step")
    # The prompt opens the run; each later call answers the Read result before it.
    assert {step: cells[column] for step, cells in steps.items()} == {
        "0": "user · turn 1", "1": "Read result · turn 1", "2": "Read result · turn 1"}
