"""Calls shaped as Claude Code sends them (built-in and MCP tools, its CLAUDE.md reminder, a tool
call and its result), mapped by ctxkit's one mapping and ingested through the real API, for the
window breakdown's view tests."""

from __future__ import annotations

import json
import time
from typing import Any

from ctxkit.instrumentation.bodies import manifest_from_bodies
from ctxkit.manifest import encode
from tests.html_page import parse

HOSTILE_DIR = '/srv/<img src=x onerror="alert(1)">'
MEMORY = (f"<system-reminder>\nCodebase and user instructions are shown below.\n\nContents of {HOSTILE_DIR}/CLAUDE.md "
          "(project instructions, checked into the codebase):\n\n# Rules\nRun the tests before answering.\n"
          "</system-reminder>")
TOOLS = [
    {"name": "Read", "description": "Reads a file from the local filesystem. " * 20,
     "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}},
    {"name": "Bash", "description": "Runs a command. " * 30, "input_schema": {"type": "object"}},
    {"name": "mcp__github__search_issues", "description": "Searches the issues of a repository. " * 10,
     "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
]


def claude_code_request(step: int) -> dict[str, Any]:
    """The request of one step: step 0 asks, later steps carry a tool call and its result each."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [
        {"type": "text", "text": MEMORY}, {"type": "text", "text": "read notes.txt and summarise it"}]}]
    for n in range(step):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"file_path": f"/srv/notes-{n}.txt"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "a line of the notes file\n" * 60}]})
    return {"model": "claude-sonnet-4-5", "max_tokens": 8000, "tools": TOOLS,
            "system": [{"type": "text", "text": "You are Claude Code, an agent for software work. " * 15}],
            "messages": messages}


def claude_code_manifest(step: int, *, input_tokens: int) -> dict[str, Any]:
    """One step's manifest as the proxy records it, with the provider's input tokens."""
    response = {"model": "claude-sonnet-4-5", "stop_reason": "end_turn", "content": [],
                "usage": {"input_tokens": input_tokens, "output_tokens": 20}}
    m = manifest_from_bodies("anthropic.messages", claude_code_request(step), response=response,
                             call_id=f"cc-step-{step}", run_id="cc-session", step=step, started=time.time() + step)
    return json.loads(encode(m))


def rows_of(body: str, table: str, attribute: str) -> dict[str, list[str]]:
    """Each row of the table with id ``table``, by its ``attribute``: its cells' text, a line break
    for each ``<br>``."""
    rows = parse(body).one(f"table#{table}").select(f"tr[{attribute}]")
    return {row.get(attribute) or "": ["\n".join(cell.lines) for cell in row.select("td")] for row in rows}
