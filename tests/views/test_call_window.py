"""The call view's window panel (ctxkit.breakdown): a Claude Code call ingested through the API
shows its system prompt, built-in and MCP tools, memory file, messages, tool results and free
space against the model's window, and the memory file's hostile path as text."""

from __future__ import annotations

import pytest
from django.test import Client

from ctxkit.breakdown import window_breakdown
from ctxkit.manifest import convert_manifest
from tests.html_page import parse
from tests.views.window_support import HOSTILE_DIR, claude_code_manifest, rows_of

pytestmark = pytest.mark.django_db


def _page(project, member, call_id: str) -> str:
    client = Client()
    client.force_login(member)
    r = client.get(f"/p/{project.slug}/calls/{call_id}/")
    assert r.status_code == 200
    return r.content.decode()


def _row(body: str, category: str) -> list[str]:
    """The text of each cell (header or data) of the window table's row of ``category``."""
    row = parse(body).one(f'tr[data-category="{category}"]')
    return [cell.text for cell in row.elements() if cell.tag in ("th", "td")]


def test_it_shows_the_window_by_category_of_a_claude_code_call(api, project, member):
    manifest = claude_code_manifest(2, input_tokens=3000)
    assert api.post(manifest).status_code in (200, 201, 202)
    expected = window_breakdown(convert_manifest(manifest)[0].items, 200_000, 3000)
    assert expected.tokens["mcp_tools"] and expected.tokens["memory"] and expected.tokens["tool_results"]
    body = _page(project, member, "cc-step-2")
    assert 'id="window-heading">Window</h2>' in body
    assert _row(body, "system")[:3] == ["System prompt", str(expected.tokens["system"]),
                                        f"{expected.tokens['system'] / 200_000:.1%}"]
    assert _row(body, "tools") == ["Built-in tools", str(expected.tokens["tools"]),
                                   f"{expected.tokens['tools'] / 200_000:.1%}", "2"]
    assert _row(body, "mcp_tools")[1:] == [str(expected.tokens["mcp_tools"]),
                                           f"{expected.tokens['mcp_tools'] / 200_000:.1%}", "1"]
    assert _row(body, "memory")[1] == str(expected.tokens["memory"])
    assert _row(body, "messages")[1] == str(expected.tokens["messages"])
    assert _row(body, "tool_results")[1] == str(expected.tokens["tool_results"])
    # Free space: the window less the provider's input; what it read beyond the items is its own row.
    assert _row(body, "free")[:3] == ["Free space", "197000", "98.5%"]
    assert _row(body, "unitemized")[1] == str(3000 - expected.counted)
    assert "Tool definitions: built-in 2, MCP 1." in body
    segments = parse(body).one("div.winbar").select("[data-segment]")
    assert [s.get("data-segment") for s in segments] == [
        "system", "tools", "mcp_tools", "memory", "messages", "tool_results", "unitemized", "free"]
    assert segments[-1].get("style") == "width:98.500%"


def test_it_names_the_memory_file_as_text(api, project, member):
    assert api.post(claude_code_manifest(0, input_tokens=0)).status_code in (200, 201, 202)
    body = _page(project, member, "cc-step-0")
    assert "<img src=x" not in body
    assert "Memory files: <code>/srv/&lt;img src=x onerror=&quot;alert(1)&quot;&gt;/CLAUDE.md</code>" in body
    assert HOSTILE_DIR not in body
    # Nothing reported: the input read is the items' tokens, and nothing is left unitemized.
    assert _row(body, "unitemized")[1:3] == ["0", "0.0%"]


def test_it_shows_no_window_panel_for_a_call_without_items(api, project, member):
    manifest = claude_code_manifest(0, input_tokens=100)
    manifest.update(call_id="bare", items=[], evidence=[], prefix=None)
    assert api.post(manifest).status_code in (200, 201, 202)
    body = _page(project, member, "bare")
    assert 'id="window-heading"' not in body


def test_it_names_each_item_as_the_agent_does(api, project, member):
    # Step 2: two Read calls and their results since the prompt, three tools, one of them MCP.
    assert api.post(claude_code_manifest(1, input_tokens=0)).status_code in (200, 201, 202)
    assert api.post(claude_code_manifest(2, input_tokens=0)).status_code in (200, 201, 202)
    body = _page(project, member, "cc-step-2")
    names = {item: cells[2].split("\n") for item, cells in rows_of(body, "items", "data-item").items()}
    assert names["tools[0]"] == ["Read", "tools[0]"]
    assert names["tools[2]"] == ["mcp__github__search_issues", "tools[2]"]
    assert names["system[0]"] == ["system", "system[0]"]
    assert names["messages[0].content[1]"] == ["user · turn 1", "messages[0].content[1]"]
    assert names["messages[3].content[0]"][0] == "Read call · turn 1"
    assert names["messages[4].content[0]"][0] == "Read result · turn 1"
    # Since step 1, the second call and its result entered: named in the diff as well.
    diff = body[body.index('id="diff"'):]
    assert 'Read call · turn 1 <span class="hint">messages[3].content[0]</span>' in diff
    # The allocation chart's data carries the names too.
    assert '"label": "mcp__github__search_issues"' in body


def test_it_shows_a_label_sent_through_the_api_as_text(api, project, member):
    manifest = claude_code_manifest(0, input_tokens=0)
    manifest["items"][0]["label"] = '<img src=x onerror="alert(2)">'
    assert api.post(manifest).status_code in (200, 201, 202)
    body = _page(project, member, "cc-step-0")
    assert "<img src=x" not in body
    assert rows_of(body, "items", "data-item")["tools[0]"][2].split("\n")[0] == '<img src=x onerror="alert(2)">'


def test_the_api_carries_the_same_window_by_category_as_the_page(api, project, member):
    assert api.post(claude_code_manifest(2, input_tokens=3000)).status_code in (200, 201, 202)
    body = _page(project, member, "cc-step-2")
    read = api.get("/api/v1/calls/cc-step-2").json()
    breakdown = read["window_breakdown"]
    assert (breakdown["window"], read["window"], breakdown["input_read"]) == (200_000, 200_000, 3000)
    assert [row["category"] for row in breakdown["categories"]] == [
        "system", "tools", "mcp_tools", "memory", "messages", "tool_results", "unitemized", "free"]
    for row in breakdown["categories"]:
        count = "" if row["count"] is None else str(row["count"])
        assert _row(body, row["category"]) == [row["label"], str(row["tokens"]), f"{row['share']:.1%}", count]
    assert f"Tool definitions: built-in {breakdown['builtin_tools']}, MCP {breakdown['mcp_tools']}." in body
    assert f"{breakdown['utilization']:.1%} of the window" in body
    assert breakdown["counted"] == sum(r["tokens"] for r in breakdown["categories"][:6])
    assert breakdown["memory_files"] == [HOSTILE_DIR + "/CLAUDE.md"]


def test_the_api_has_no_window_breakdown_for_a_call_without_items(api):
    manifest = claude_code_manifest(0, input_tokens=100)
    manifest.update(call_id="bare", items=[], evidence=[], prefix=None)
    assert api.post(manifest).status_code in (200, 201, 202)
    assert api.get("/api/v1/calls/bare").json()["window_breakdown"] is None
