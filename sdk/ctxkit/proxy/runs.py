"""Which run a proxied call belongs to, and its step in that run.

The proxy sees single HTTP requests; the run is the agent's conversation. In order:

1. an explicit header: ``X-Ctxview-Run`` (and ``X-Ctxview-Agent`` for the agent), which the
   proxy strips before forwarding;
2. the client's own session identity: Claude Code's ``X-Claude-Code-Session-Id`` header, or the
   ``session_id`` inside ``metadata.user_id`` (a JSON string) of an Anthropic request;
3. conversation continuity: a call whose messages (Anthropic / Chat Completions ``messages``,
   Responses ``input``) extend the messages of a recent call continues that call's run, and a
   Responses call with ``previous_response_id`` continues the run of that response; otherwise
   the call starts a new run. A call with the same messages as a recent call that failed (an
   SDK's retry after a 429 or 529) continues that call's run too. A call whose first user message
   holds a compaction summary (ctxkit.record.summaries, or Anthropic's ``compaction`` block)
   continues the run whose recent answer wrote a line of it: an agent that compacts itself asks
   the model for the summary, then opens its shorter history with what the model answered.

A sub-agent's calls become a child run of the call that started it. Claude Code's sub-agent tool
(``Agent``; ``Task`` in earlier versions) sends the sub-agent's calls with the session's own
identity, so a session call is a sub-agent's first call when a text block of its first user
message equals the ``prompt`` of such a ``tool_use`` that a recent answer of that session asked
for (``delegations``), and its messages do not extend the session's main conversation. Its run
is ``<parent run>/agent-<tool_use id>`` (hashed to fit an id), with ``parent_run_id`` the
session's run and ``parent_call_id`` the call whose answer held the ``tool_use``; its agent is
``<agent>:<subagent_type>``. Steps count from 0 in the child run; the parent's stay contiguous.
Its later calls, which extend its own conversation, continue the child run; the side requests
Claude Code makes in a session (a title, a topic check) match no prompt and stay in the
session's run. A call without a session identity whose first user message
is such a prompt starts the child run of the run that asked for it.

Messages are compared by a hash of each message without its ``cache_control`` markers (an agent
moves its cache breakpoint to the newest message every turn) and with a string content taken as
the one text block it means (Claude Code sends its mid-conversation ``system`` message as a list
of one text block, and the next turn as a string). The memory of recent
conversations is bounded (``max_conversations``, least recently used out first). Steps count
from 0 per run, in the order the calls end; a restarted proxy counts again from 0.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ctxkit.record.summaries import summary_strategy

__all__ = ["RunResolver", "Placement", "Delegation", "SUBAGENT_TOOLS", "session_of", "agent_of", "conversation_of",
           "summary_text"]

RUN_HEADER = "x-ctxview-run"
AGENT_HEADER = "x-ctxview-agent"
SESSION_HEADER = "x-claude-code-session-id"
SUBAGENT_TOOLS = ("Agent", "Task")  # Claude Code's tool that starts a sub-agent, then and now


@dataclass(frozen=True)
class Placement:
    run_id: str
    step: int
    agent: str
    how: str  # header, session, continued, new, subagent
    parent_run_id: str = ""
    parent_call_id: str = ""


@dataclass(frozen=True)
class Delegation:
    """A sub-agent's start that an answer asked for: its ``tool_use`` id, prompt and type."""

    tool_use_id: str
    prompt: str
    subagent_type: str = ""


@dataclass(frozen=True)
class _Child:
    run_id: str
    parent_run_id: str
    parent_call_id: str
    agent: str


def session_of(request: dict[str, Any], headers: dict[str, str]) -> str:
    """The client's session id: Claude Code's header, else ``metadata.user_id``'s ``session_id``."""
    session = headers.get(SESSION_HEADER, "").strip()
    if session:
        return session
    metadata = request.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str) and user_id.startswith("{"):
        try:
            parsed = json.loads(user_id)
        except ValueError:
            return ""
        inner = parsed.get("session_id") if isinstance(parsed, dict) else None
        if isinstance(inner, str):
            return inner.strip()
    return ""


def agent_of(headers: dict[str, str], default: str) -> str:
    """``X-Ctxview-Agent``, else the proxy's ``--agent``, else the client's product from its
    User-Agent (``claude-cli/2.1.3 (external, cli)`` -> ``claude-cli``), else ``proxy``."""
    explicit = headers.get(AGENT_HEADER, "").strip()
    if explicit:
        return explicit
    if default:
        return default
    product = headers.get("user-agent", "").split(" ")[0].split("/")[0].strip()
    return product or "proxy"


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _normal(message: Any) -> Any:
    message = _without_cache_control(message)
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        message = {**message, "content": [{"type": "text", "text": message["content"]}]}
    return message


def _chain(messages: list[Any]) -> list[str]:
    """Running hashes: entry i identifies messages[:i + 1]."""
    out = []
    running = hashlib.sha256()
    for message in messages:
        text = json.dumps(_normal(message), sort_keys=True, ensure_ascii=False,
                          separators=(",", ":"), default=str)
        running.update(hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest())
        out.append(running.copy().hexdigest()[:32])
    return out


def conversation_of(api: str, request: dict[str, Any]) -> list[Any]:
    """The call's history: Anthropic / Chat Completions ``messages``, Responses ``input``."""
    key = "input" if api.startswith("openai.responses") else "messages"
    value = request.get(key)
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return value if isinstance(value, list) else []


# Lines shorter than this ("Summary:", "3. Pending Tasks: none.") are too common to link runs by.
MIN_LINKING_LINE = 24
MAX_ANSWER_LINES = 64  # lines of one answer remembered for linking
MAX_RUN_ID = 200  # ctxkit.manifest.MAX_ID


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            out.append(block["text"])
        elif isinstance(block, dict) and block.get("type") == "compaction":
            out.extend(_texts(block.get("content")))
    return out


def summary_text(history: list[Any]) -> str:
    """The first user message's text when it holds a compaction summary, else ``""``."""
    first = next((m for m in history if isinstance(m, dict) and m.get("role") == "user"), None)
    if first is None:
        return ""
    content = first.get("content")
    blocks = content if isinstance(content, list) else []
    texts = _texts(content)
    if any(isinstance(b, dict) and b.get("type") == "compaction" for b in blocks) \
            or any(summary_strategy(text) for text in texts):
        return "\n".join(texts)
    return ""


def _prompt_key(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _first_user_keys(history: list[Any]) -> list[str]:
    """Keys of the text blocks of the first user message (Claude Code puts its reminders in
    blocks before the sub-agent's prompt)."""
    first = next((m for m in history if isinstance(m, dict) and m.get("role") == "user"), None)
    if first is None:
        return []
    return [_prompt_key(text) for text in _texts(first.get("content")) if text.strip()]


def _child_run_id(parent_run_id: str, tool_use_id: str) -> str:
    run_id = f"{parent_run_id}/agent-{tool_use_id}"
    if len(run_id) <= MAX_RUN_ID:
        return run_id
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{parent_run_id[:MAX_RUN_ID - len(digest) - 7]}/agent-{digest}"


def _line_keys(text: str) -> list[str]:
    out = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if len(line) >= MIN_LINKING_LINE:
            out.append(hashlib.sha256(line.encode("utf-8", "surrogatepass")).hexdigest()[:32])
    return out


class RunResolver:
    """Places each call in a run; used from the proxy's one builder thread (and locked anyway)."""

    def __init__(self, *, max_conversations: int = 10_000) -> None:
        self.max_conversations = max_conversations
        self._conversations: OrderedDict[str, str] = OrderedDict()  # chain hash -> run id
        self._failed: OrderedDict[str, str] = OrderedDict()  # chain hash of a failed call -> run id
        self._responses: OrderedDict[str, str] = OrderedDict()  # Responses id -> run id
        self._answers: OrderedDict[str, str] = OrderedDict()  # hash of a line an answer wrote -> run id
        self._delegations: OrderedDict[str, _Child] = OrderedDict()  # prompt key -> the child it starts
        self._children: OrderedDict[str, _Child] = OrderedDict()  # child run id -> its links
        self._steps: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def place(self, api: str, request: dict[str, Any], headers: dict[str, str], *, default_agent: str = "",
              response_id: str = "", failed: bool = False, answer: str = "", call_id: str = "",
              delegations: tuple[Delegation, ...] = ()) -> Placement:
        """The run, step and agent of one call (``response_id``: the id a Responses call answered
        with; ``failed``: the call ended in an error, so the same messages again are its retry;
        ``answer``: the text the model answered, which a compacted history may open with;
        ``call_id``: the call's id, the parent of the sub-agents its answer starts;
        ``delegations``: the sub-agents the answer asked for)."""
        agent = agent_of(headers, default_agent)
        history = conversation_of(api, request)
        chain = _chain(history)
        child: _Child | None = None
        with self._lock:
            run_id, how = headers.get(RUN_HEADER, "").strip(), "header"
            if not run_id:
                session, how = session_of(request, headers), "session"
                run_id = f"session-{session}" if session else ""
                if run_id:
                    child = self._subagent(run_id, history, chain)
            if not run_id:
                run_id, how = self._continued(request, chain, summary_text(history)), "continued"
                if not run_id:
                    child = self._subagent("", history, chain)
            if child is not None:
                run_id, how = child.run_id, "subagent"
            if not run_id:
                run_id, how = self._new_run(agent), "new"
            child = child or self._children.get(run_id)
            if child is not None:
                agent = child.agent
            for delegation in delegations:
                self._delegate(delegation, run_id, call_id, agent)
            if chain:
                self._remember(self._conversations, chain[-1], run_id)
                if failed:
                    self._remember(self._failed, chain[-1], run_id)
                else:
                    self._failed.pop(chain[-1], None)
            if response_id:
                self._remember(self._responses, response_id, run_id)
            for key in _line_keys(answer)[:MAX_ANSWER_LINES]:
                self._remember(self._answers, key, run_id, limit=self.max_conversations * 16)
            step = self._steps.pop(run_id, 0)
            self._steps[run_id] = step + 1
            while len(self._steps) > self.max_conversations:
                self._steps.popitem(last=False)
        return Placement(run_id=run_id, step=step, agent=agent, how=how,
                         parent_run_id=child.parent_run_id if child else "",
                         parent_call_id=child.parent_call_id if child else "")

    def _subagent(self, run_id: str, history: list[Any], chain: list[str]) -> _Child | None:
        """The child run a call of ``run_id`` (``""``: a call without a session) belongs to: the
        one whose conversation it extends, else the one whose prompt it opens with, unless it
        extends ``run_id``'s own conversation."""
        for prefix in reversed(chain[:-1]):
            owner = self._conversations.get(prefix)
            if owner is None:
                continue
            child = self._children.get(owner)
            if child is not None and (not run_id or child.parent_run_id == run_id):
                self._children.move_to_end(owner)
                return child
            if owner == run_id:  # the session's main conversation, or a side request's
                return None
        for key in _first_user_keys(history):
            child = self._delegations.get(key)
            if child is not None and (not run_id or child.parent_run_id == run_id):
                self._remember_child(child)
                return child
        return None

    def _delegate(self, delegation: Delegation, run_id: str, call_id: str, agent: str) -> None:
        if not delegation.prompt.strip() or not delegation.tool_use_id:
            return
        base = agent.split(":")[0]
        child = _Child(run_id=_child_run_id(run_id, delegation.tool_use_id), parent_run_id=run_id,
                       parent_call_id=call_id,
                       agent=f"{base}:{delegation.subagent_type}"[:MAX_RUN_ID] if delegation.subagent_type else base)
        self._delegations[_prompt_key(delegation.prompt)] = child
        self._delegations.move_to_end(_prompt_key(delegation.prompt))
        while len(self._delegations) > self.max_conversations:
            self._delegations.popitem(last=False)

    def _remember_child(self, child: _Child) -> None:
        self._children[child.run_id] = child
        self._children.move_to_end(child.run_id)
        while len(self._children) > self.max_conversations:
            self._children.popitem(last=False)

    def _continued(self, request: dict[str, Any], chain: list[str], summary: str) -> str:
        previous = request.get("previous_response_id")
        if isinstance(previous, str) and previous in self._responses:
            self._responses.move_to_end(previous)
            return self._responses[previous]
        if chain and chain[-1] in self._failed:  # a retry of a failed call
            return self._failed[chain[-1]]
        for prefix in reversed(chain[:-1]):  # the longest earlier conversation this one extends
            run_id = self._conversations.get(prefix)
            if run_id is not None:
                self._conversations.move_to_end(prefix)
                return run_id
        for key in _line_keys(summary):  # a compacted history: the run that wrote its summary
            run_id = self._answers.get(key)
            if run_id is not None:
                return run_id
        return ""

    def _new_run(self, agent: str) -> str:
        return f"{agent}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"

    def _remember(self, table: OrderedDict[str, str], key: str, run_id: str, limit: int = 0) -> None:
        table[key] = run_id
        table.move_to_end(key)
        while len(table) > (limit or self.max_conversations):
            table.popitem(last=False)
