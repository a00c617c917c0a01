"""Items named as the agent names them: a tool by its name, a message by its role and turn.

The mapping of a plain call (:mod:`ctxkit.record.call_items`) gives each item its JSON path as
its id (``messages[3].content[1]``, ``input[5]``, ``tools[2]``), which keeps an item's identity
from call to call; the label is what a person reads beside it:

- a tool definition: the tool's name (``Read``, ``mcp__github__create_issue``, ``exec_command``;
  a provider's built-in tool without a name by its type, ``web_search``);
- a tool call: ``<tool> call · turn N``; its result ``<tool> result · turn N`` (the tool found
  by the call's group, else ``tool result · turn N``);
- any other message: ``<role> · turn N`` (``user``, ``assistant``, ``system`` for a system or
  developer message inside the conversation); instructions before the conversation: ``system``.

A turn starts at each user message that follows a model answer or a tool result (or opens the
conversation): the user's prompt and everything the model and its tools did until the next
prompt, as an agent's transcript counts turns. Consecutive user messages (Codex's environment
context and the prompt; Claude Code's reminders and the prompt) are one turn, and so is a
message that carries tool results with text beside them (Claude Code's reminders after a
result): the message is the part's path up to its first index (``messages[3]``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol

from ctxkit.record.items import clip

__all__ = ["LabelledPart", "item_labels", "tool_name"]

MAX_LABEL = 200
TURN = " · turn "
_MESSAGE = re.compile(r"[A-Za-z_.]*\[\d+\]")


class LabelledPart(Protocol):
    @property
    def role(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def group(self) -> str | None: ...
    @property
    def text(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def source(self) -> str: ...


@lru_cache(maxsize=4096)  # a conversation's later calls send the same tools and calls again
def tool_name(text: str) -> str:
    """A tool's name from the JSON the mapping records for its definition or call (canonical
    JSON): its ``name``, else its function's ``name``, else its ``type``; empty when none."""
    if not text.startswith("{"):
        return ""
    try:
        value = json.loads(text)
    except ValueError:
        return ""
    if not isinstance(value, dict):
        return ""
    function = value.get("function")
    for name in (value.get("name"), function.get("name") if isinstance(function, dict) else None, value.get("type")):
        if isinstance(name, str) and name.strip():
            return name.strip()
    return ""


def item_labels(parts: Sequence[LabelledPart]) -> list[str]:
    """One label per part, in order (see the module notes). Parts carry ``role`` (system,
    tools, user, assistant, tool), ``kind`` (already inferred), ``group`` (a tool call and its
    result share it), ``text``, ``name`` (the tool's name when the mapping knows it) and
    ``source`` (its path in the request)."""
    labels: list[str] = []
    tools_by_group: dict[str, str] = {}
    turn, previous, message = 0, "", ""
    for p in parts:
        if p.role == "tools":
            labels.append(clip(p.name or tool_name(p.text) or "tool", MAX_LABEL))
            continue
        found = _MESSAGE.match(p.source)
        same_message = found is not None and found.group(0) == message
        message = found.group(0) if found else ""
        if p.role == "user" and p.kind != "tool_result" and previous != "user" and not same_message:
            turn += 1
        at = f"{TURN}{max(turn, 1)}"
        if p.role == "system":
            labels.append("system" + (at if turn else ""))
            continue
        if p.role == "tool" or p.kind == "tool_result":
            name = p.name or (tools_by_group.get(p.group, "") if p.group else "")
            labels.append(clip(f"{name or 'tool'} result{at}", MAX_LABEL))
            previous = "tool"
            continue
        if p.role == "assistant" and p.group:
            name = p.name or tool_name(p.text) or "tool"
            tools_by_group[p.group] = name
            labels.append(clip(f"{name} call{at}", MAX_LABEL))
        else:
            labels.append(clip(f"{p.role or 'user'}{at}", MAX_LABEL))
        previous = p.role
    return labels
