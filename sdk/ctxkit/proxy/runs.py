"""Which run a proxied call belongs to, and its step in that run.

The proxy sees single HTTP requests; the run is the agent's conversation. In order:

1. an explicit header: ``X-Ctxview-Run`` (and ``X-Ctxview-Agent`` for the agent), which the
   proxy strips before forwarding;
2. the client's own session identity (ctxkit.agents: Claude Code's session header or the
   ``session_id`` in its request's metadata, Codex's ``session-id`` header);
3. conversation continuity: a call whose history (ctxkit.proxy.history) extends the history of a
   recent call continues that call's run, and a call that names an earlier response (Responses'
   ``previous_response_id``) continues the run of that response; otherwise
   the call starts a new run. A call with the same messages as a recent call that failed (an
   SDK's retry after a 429 or 529) continues that call's run too. A call whose first user message
   holds a compaction summary (ctxkit.agents, or a provider's compaction block)
   continues the run whose recent answer wrote a line of it: an agent that compacts itself asks
   the model for the summary, then opens its shorter history with what the model answered.

A sub-agent's calls become a child run of the call that started it. An agent's sub-agent tool
(ctxkit.agents: Claude Code's) sends the sub-agent's calls with the session's own
identity, so a session call is a sub-agent's first call when a text block of its first user
message equals the ``prompt`` of such a tool call that a recent answer of that session asked
for (``delegations``), and its messages do not extend the session's main conversation. Its run
is ``<parent run>/agent-<tool_use id>`` (hashed to fit an id), with ``parent_run_id`` the
session's run and ``parent_call_id`` the call whose answer held the ``tool_use``; its agent is
``<agent>:<subagent_type>``. Steps count from 0 in the child run; the parent's stay contiguous.
Its later calls, which extend its own conversation, continue the child run; the side requests
an agent makes in a session (a title, a topic check) match no prompt and stay in the
session's run. A call without a session identity whose first user message
is such a prompt starts the child run of the run that asked for it.

Messages are compared by a hash of each message as its provider normalises it (without
Anthropic's ``cache_control`` markers, a string content as the one text block it means). The
memory of recent conversations is bounded (``max_conversations``, least recently used out first,
ctxkit.proxy.lru). Steps count
from 0 per run, in the order the calls end; a restarted proxy counts again from 0.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ctxkit.agents import Delegation, agent_name, session_of
from ctxkit.proxy.history import History
from ctxkit.proxy.lru import LRU

__all__ = ["RunResolver", "Placement", "Delegation", "agent_of"]

RUN_HEADER = "x-ctxview-run"
AGENT_HEADER = "x-ctxview-agent"


@dataclass(frozen=True)
class Placement:
    run_id: str
    step: int
    agent: str
    how: str  # header, session, continued, new, subagent
    parent_run_id: str = ""
    parent_call_id: str = ""


@dataclass(frozen=True)
class _Child:
    run_id: str
    parent_run_id: str
    parent_call_id: str
    agent: str


def agent_of(headers: dict[str, str], default: str) -> str:
    """``X-Ctxview-Agent``, else the proxy's ``--agent``, else the client's product from its
    User-Agent (``claude-cli/2.1.3 (external, cli)`` -> ``claude-cli``), else ``proxy``."""
    explicit = headers.get(AGENT_HEADER, "").strip()
    return explicit or agent_name(headers, default)


# Lines shorter than this ("Summary:", "3. Pending Tasks: none.") are too common to link runs by.
MIN_LINKING_LINE = 24
MAX_ANSWER_LINES = 64  # lines of one answer remembered for linking
MAX_RUN_ID = 200  # ctxkit.manifest.MAX_ID


def _prompt_key(text: str) -> str:
    return hashlib.sha256(text.strip().encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _first_user_keys(history: History) -> list[str]:
    """Keys of the texts of the first user message (Claude Code puts its reminders in blocks
    before the sub-agent's prompt)."""
    first = history.first_user
    return [_prompt_key(text) for text in first.texts if text.strip()] if first is not None else []


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
        limit = max_conversations
        self._conversations: LRU[str, str] = LRU(limit)  # chain hash -> run id
        self._failed: LRU[str, str] = LRU(limit)  # chain hash of a failed call -> run id
        self._responses: LRU[str, str] = LRU(limit)  # a response's id -> run id
        self._answers: LRU[str, str] = LRU(limit * 16)  # hash of a line an answer wrote -> run id
        self._delegations: LRU[str, _Child] = LRU(limit)  # prompt key -> the child it starts
        self._children: LRU[str, _Child] = LRU(limit)  # child run id -> its links
        self._steps: LRU[str, int] = LRU(limit)
        self._lock = threading.Lock()

    def place(self, api: str, request: dict[str, Any], headers: dict[str, str], *, default_agent: str = "",
              response_id: str = "", failed: bool = False, answer: str = "", call_id: str = "",
              delegations: tuple[Delegation, ...] = (), history: History | None = None,
              unseen: int = 0) -> Placement:
        """The run, step and agent of one call (``response_id``: the id a Responses call answered
        with; ``failed``: the call ended in an error, so the same messages again are its retry;
        ``answer``: the text the model answered, which a compacted history may open with;
        ``call_id``: the call's id, the parent of the sub-agents its answer starts;
        ``delegations``: the sub-agents the answer asked for; ``history``: the call's history
        when the caller parsed it already; ``unseen``: calls of its run just before it that were
        never placed, counted in its step: an imported transcript that does not keep them)."""
        agent = agent_of(headers, default_agent)
        history = history if history is not None else History(api, request)
        chain = history.chain
        child: _Child | None = None
        with self._lock:
            run_id, how = headers.get(RUN_HEADER, "").strip(), "header"
            if not run_id:
                first = history.first_user
                session, how = session_of(request, headers, first.texts[0] if first and first.texts else ""), "session"
                run_id = f"session-{session}" if session else ""
                if run_id:
                    child = self._subagent(run_id, history, chain)
            if not run_id:
                run_id, how = self._continued(history, chain), "continued"
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
                self._conversations.put(chain[-1], run_id)
                if failed:
                    self._failed.put(chain[-1], run_id)
                else:
                    self._failed.pop(chain[-1])
            if response_id:
                self._responses.put(response_id, run_id)
            for key in _line_keys(answer)[:MAX_ANSWER_LINES]:
                self._answers.put(key, run_id)
            step = (self._steps.pop(run_id) or 0) + max(unseen, 0)
            self._steps.put(run_id, step + 1)
        return Placement(run_id=run_id, step=step, agent=agent, how=how,
                         parent_run_id=child.parent_run_id if child else "",
                         parent_call_id=child.parent_call_id if child else "")

    def _subagent(self, run_id: str, history: History, chain: list[str]) -> _Child | None:
        """The child run a call of ``run_id`` (``""``: a call without a session) belongs to: the
        one whose conversation it extends, else the one whose prompt it opens with, unless it
        extends ``run_id``'s own conversation."""
        for prefix in reversed(chain[:-1]):
            owner = self._conversations.get(prefix)
            if owner is None:
                continue
            child = self._children.get(owner)
            if child is not None and (not run_id or child.parent_run_id == run_id):
                self._children.touch(owner)
                return child
            if owner == run_id:  # the session's main conversation, or a side request's
                return None
        for key in _first_user_keys(history):
            child = self._delegations.get(key)
            if child is not None and (not run_id or child.parent_run_id == run_id):
                self._children.put(child.run_id, child)
                return child
        return None

    def _delegate(self, delegation: Delegation, run_id: str, call_id: str, agent: str) -> None:
        if not delegation.prompt.strip() or not delegation.tool_use_id:
            return
        base = agent.split(":")[0]
        child = _Child(run_id=_child_run_id(run_id, delegation.tool_use_id), parent_run_id=run_id,
                       parent_call_id=call_id,
                       agent=f"{base}:{delegation.subagent_type}"[:MAX_RUN_ID] if delegation.subagent_type else base)
        self._delegations.put(_prompt_key(delegation.prompt), child)

    def _continued(self, history: History, chain: list[str]) -> str:
        previous = history.provider.previous(history.request)
        if previous:
            owner = self._responses.touch(previous)
            if owner is not None:
                return owner
        if chain and chain[-1] in self._failed:  # a retry of a failed call
            return self._failed.get(chain[-1]) or ""
        for prefix in reversed(chain[:-1]):  # the longest earlier conversation this one extends
            run_id = self._conversations.touch(prefix)
            if run_id is not None:
                return run_id
        for key in _line_keys(history.summary_text):  # a compacted history: the run that wrote its summary
            run_id = self._answers.get(key)
            if run_id is not None:
                return run_id
        return ""

    def _new_run(self, agent: str) -> str:
        return f"{agent}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
