"""Claude Code's habits, as its requests show them (Anthropic Messages through ``ANTHROPIC_BASE_URL``).

- Session: the ``X-Claude-Code-Session-Id`` header, or the ``session_id`` inside
  ``metadata.user_id`` (a JSON string) of its requests.
- Sub-agents: its tool ``Agent`` (``Task`` in earlier versions) starts one; the tool call's
  ``prompt`` opens the sub-agent's first user message, ``subagent_type`` names it.
- Summaries: a compacted history opens with :data:`OPENING`; its ``/compact`` command leaves a
  ``<command-name>/compact</command-name>`` block in a later user message of the same call
  (without one the compaction was the CLI's own, on a full window).
- Memory files: CLAUDE.md and its rules go into one user text block inside
  ``<system-reminder>``, each under a line "Contents of <path> (<what it is>):".
- MCP tools are named ``mcp__<server>__<tool>``.
- Workspace: its environment section names the working directory (``# Environment`` with
  `` - Primary working directory: <path>``, a ``system`` message of the conversation; earlier
  versions ``<env>`` with ``Working directory: <path>`` in the system prompt), and its git
  status snapshot the branch (``gitStatus`` with ``Current branch: <name>``, in the first user
  message's reminder; earlier versions in the system prompt).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from ctxkit.agents.transcripts import JsonLines, TranscriptCall, time_of

__all__ = ["OPENING", "SESSION_HEADER", "SUBAGENT_TOOLS", "MCP_PREFIX", "MCP_MARK", "session", "delegation",
           "is_summary", "summary_trigger", "memory_files", "mcp_server", "workspace", "transcripts_folder",
           "transcript_files", "session_file", "TranscriptReader", "transcript_calls"]

OPENING = "This session is being continued from a previous conversation"
SESSION_HEADER = "x-claude-code-session-id"
SUBAGENT_TOOLS = ("Agent", "Task")  # the tool that starts a sub-agent, then and now
MCP_PREFIX = "mcp__"
# A tool definition's canonical JSON (compact) holds this when the tool is an MCP server's,
# whatever the provider's shape ({"name": ...} or {"function": {"name": ...}}).
MCP_MARK = f'"name":"{MCP_PREFIX}'
_MANUAL = re.compile(r"<command-name>\s*/compact\s*</command-name>")
_REMINDER = "<system-reminder>"
_FILE = re.compile(r"^Contents of (\S[^\n]*?) \([^()\n]*\):$", re.MULTILINE)


def session(request: dict[str, Any], headers: dict[str, str]) -> str:
    """The session id: the header, else ``metadata.user_id``'s ``session_id``; ``""`` without one."""
    found = headers.get(SESSION_HEADER, "").strip()
    if found:
        return found
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


def delegation(name: Any, arguments: Any) -> tuple[str, str] | None:
    """(prompt, subagent type) when a tool call of ``name`` with ``arguments`` (a dict or its
    JSON text) starts a sub-agent, else None."""
    if name not in SUBAGENT_TOOLS:
        return None
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict) or not isinstance(arguments.get("prompt"), str):
        return None
    kind = arguments.get("subagent_type")
    return arguments["prompt"], kind if isinstance(kind, str) else ""


def is_summary(head: str) -> bool:
    """Does this text (stripped at the left) open like Claude Code's compaction summary?"""
    return head.startswith(OPENING)


def summary_trigger(user_text: str) -> str:
    """Given the user messages from the one holding a summary on: ``manual`` when they hold the
    ``/compact`` command, ``auto`` when they hold Claude Code's summary without one, else ``""``."""
    if _MANUAL.search(user_text):
        return "manual"
    if OPENING in user_text:
        return "auto"
    return ""


def memory_files(head: str) -> list[str] | None:
    """The files a user text (stripped at the left) injects when it is the memory-file reminder."""
    if head.startswith(_REMINDER):
        return _FILE.findall(head) or None
    return None


def mcp_server(name: str) -> str | None:
    """The MCP server of a tool named ``mcp__<server>__<tool>``, else None."""
    parts = name.split("__")
    if len(parts) < 3 or parts[0] != MCP_PREFIX.rstrip("_") or not parts[1]:
        return None
    return parts[1]


_ENVIRONMENT = ("# Environment\n", "<env>")
_CWD = re.compile(r"^(?: - Primary working directory|Working directory): *(\S[^\n]*)$", re.MULTILINE)
_GIT_STATUS = "gitStatus"
_BRANCH = re.compile(r"^Current branch: *(\S[^\n]*)$", re.MULTILINE)


def _texts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                yield block["text"]


def _context_texts(request: dict[str, Any]) -> Iterator[str]:
    """Where Claude Code puts its environment and git status: the system prompt, its ``system``
    messages and the first user message."""
    yield from _texts(request.get("system"))
    messages = request.get("messages")
    first_user = True
    for message in messages if isinstance(messages, list) else ():
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system" or (role == "user" and first_user):
            yield from _texts(message.get("content"))
        first_user = first_user and role != "user"


def workspace(request: dict[str, Any]) -> tuple[str, str]:
    """(working directory, git branch) as a request's environment section and git status tell
    them; ``""`` for what it does not tell (a folder outside a repository has no git status)."""
    cwd = branch = ""
    for text in _context_texts(request):
        if not cwd and any(mark in text for mark in _ENVIRONMENT):
            found = _CWD.search(text)
            cwd = found.group(1).strip() if found else ""
        if not branch and _GIT_STATUS in text:
            found = _BRANCH.search(text)
            branch = found.group(1).strip() if found else ""
        if cwd and branch:
            break
    return cwd, branch


# Transcripts: ~/.claude/projects/<project>/<session>.jsonl, one JSON object a line.
# Claude Code 2.1.332 and later write the request itself: ``api-request-shape`` (system, tools),
# ``api-request-blob`` (one message by its hash) and ``api-request`` per call (parameters, the
# blob hashes of its messages in ``tail``, the ``cache_control`` paths in ``cacheControl``), so the
# rebuilt request is the one sent. Older transcripts hold only ``user`` / ``assistant`` lines: the
# request is the conversation so far, without system prompt and tools (``exact`` False).

SYNTHETIC = "<synthetic>"  # the model Claude Code names on assistant lines it wrote itself
# A ``system`` line of this subtype marks a compaction (``compactMetadata``: ``trigger`` manual /
# auto, ``preTokens``); the ``user`` line after it (``isCompactSummary``) holds the summary. The
# summary request itself is not written. Sub-agents write ``<session>/subagents/agent-<id>.jsonl``
# (``isSidechain`` lines) beside the session's ``<session>.jsonl``.
COMPACT_BOUNDARY = "compact_boundary"


def transcripts_folder() -> str:
    """Where Claude Code keeps its transcripts (``$CLAUDE_CONFIG_DIR/projects``, else ``~/.claude/projects``)."""
    home = os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    return os.path.join(home, "projects")


def session_file(path: str) -> str:
    """The session transcript a sub-agent's file belongs to (``<dir>/<session>/subagents/x.jsonl``
    -> ``<dir>/<session>.jsonl``), else the file itself."""
    folder = os.path.dirname(path)
    if os.path.basename(folder) == "subagents":
        return os.path.dirname(folder) + ".jsonl"
    return path


def _file_order(path: str) -> tuple[float, str, int, float, str]:
    """Sessions oldest first, each followed by its sub-agents' files (the call that started a
    sub-agent is read before the sub-agent's own calls, so they become its child run)."""
    session = session_file(path)
    try:
        written = os.path.getmtime(session)
    except OSError:
        written = os.path.getmtime(path)
    return written, session, int(session != path), os.path.getmtime(path), path


def transcript_files(folder: str, project_dir: str = "") -> list[str]:
    """The transcripts under ``folder`` (one project's with ``project_dir``), oldest first, each
    session's sub-agent transcripts right after it."""
    if project_dir:  # Claude Code names a project's folder by its path, "/" and "." as "-"
        wanted = os.path.abspath(project_dir).replace("/", "-").replace(".", "-")
        folder = os.path.join(folder, wanted)
    found: list[str] = []
    for root, _dirs, names in os.walk(folder):
        found.extend(os.path.join(root, n) for n in names if n.endswith(".jsonl"))
    return sorted(found, key=_file_order)


def _set_path(request: dict[str, Any], path: list[Any], value: Any) -> None:
    """Put ``value`` as ``cache_control`` at ``path`` (keys and indexes) of the request. The
    request shares its parts with the reader's tables: each container on the way is copied."""
    node: Any = request
    for step in path:
        if isinstance(node, dict) and isinstance(step, str) and step in node:
            child = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            child = node[step]
        else:
            return
        if isinstance(child, (dict, list)):
            child = child.copy()
            node[step] = child
        node = child
    if isinstance(node, dict) and "content" in node and isinstance(node["content"], str):
        node["content"] = [{"type": "text", "text": node["content"], "cache_control": value}]
    elif isinstance(node, dict):
        node["cache_control"] = value


def _wire(message: Any) -> Any:
    """A message as Claude Code sends it: the transcript keeps a user or system text as one text
    block; on the wire a lone plain text block is a string (a ``cache_control`` mark, put
    back after, turns it into a block again)."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "system"):
        return message
    content = message.get("content")
    if isinstance(content, list):
        content = [_wire_result(block) for block in content]
        message = {**message, "content": content}
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
            and set(content[0]) == {"type", "text"} and content[0]["type"] == "text":
        return {**message, "content": content[0]["text"]}
    return message


def _wire_result(block: Any) -> Any:
    """A tool result as sent: a lone text block of its content is a string, its cache mark on
    the result."""
    if not isinstance(block, dict) or block.get("type") != "tool_result":
        return block
    inner = block.get("content")
    if isinstance(inner, list) and len(inner) == 1 and isinstance(inner[0], dict) and inner[0].get("type") == "text" \
            and set(inner[0]) <= {"type", "text", "cache_control"}:
        out = {**block, "content": inner[0]["text"]}
        if "cache_control" in inner[0]:
            out["cache_control"] = inner[0]["cache_control"]
        return out
    return block


class _Sent(NamedTuple):
    """The messages of a rebuilt request as the transcript holds them, and each as sent (without
    its cache marks): the next request keeps the first ``keep`` of both."""

    messages: list[Any]
    wired: list[Any]


def _rebuilt(line: dict[str, Any], shapes: dict[str, Any], blobs: dict[str, Any],
             previous: _Sent) -> tuple[dict[str, Any], _Sent] | None:
    """The request of an ``api-request`` line (its messages: the first ``keep`` of the previous
    request's, then those its ``tail`` names) and its messages for the next one, or None when its
    shape or a message is missing. Its parts are those of the reader's tables, shared with later
    requests: nothing here changes them in place, and a message kept is not converted again."""
    shape = shapes.get(line.get("shapeHash", ""))
    tail = line.get("tail")
    if not isinstance(shape, dict) or not isinstance(tail, list) or any(h not in blobs for h in tail):
        return None
    params = {k: v for k, v in (line.get("params") or {}).items() if k != "betas"}  # betas go in a header
    request: dict[str, Any] = {**params}
    if shape.get("system") is not None:
        request["system"] = shape["system"]
    if shape.get("tools") is not None:
        request["tools"] = shape["tools"]
    keep = line.get("keep")
    keep = keep if isinstance(keep, int) and keep > 0 else 0
    added = [blobs[h] for h in tail]
    sent = _Sent([*previous.messages[:keep], *added], [*previous.wired[:keep], *(_wire(m) for m in added)])
    request["messages"] = list(sent.messages)
    for mark in line.get("cacheControl") or []:
        if isinstance(mark, dict) and isinstance(mark.get("path"), list):
            _set_path(request, mark["path"], mark.get("value"))
    request["messages"] = [wired if message is held else _wire(message)  # a marked message is a copy
                           for message, held, wired in zip(request["messages"], sent.messages, sent.wired,
                                                           strict=True)]
    return request, sent


def _forms(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The shapes a transcript's message may have had on the wire (its role and content as
    written, a text content as one text block, the line's whole message where it holds more)."""
    content = message.get("content")
    yield {"role": message.get("role"), "content": content}
    if isinstance(content, str):
        yield {"role": message.get("role"), "content": [{"type": "text", "text": content}]}
    if message.keys() != {"role", "content"}:
        yield message


def _remember(blobs: dict[str, Any], message: dict[str, Any]) -> None:
    """Index a message written on a user or assistant line by the hashes an ``api-request``'s
    ``tail`` names messages by (SHA-256 of its canonical JSON: sorted keys, no spaces)."""
    for form in _forms(message):
        text = json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        blobs.setdefault(hashlib.sha256(text.encode()).hexdigest(), form)


def _merge(response: dict[str, Any] | None, message: dict[str, Any]) -> dict[str, Any]:
    """Claude Code writes one assistant line per content block of a response: join them."""
    if response is None or response.get("id") != message.get("id"):
        return {**message, "content": list(message.get("content") or [])}
    response["content"] = [*response.get("content", []), *(message.get("content") or [])]
    for key in ("usage", "stop_reason", "stop_sequence"):
        if message.get(key) is not None:
            response[key] = message[key]
    return response


_META = ("sessionId", "version", "cwd", "gitBranch", "timestamp")


def _boundary(metadata: Any) -> tuple[str, int]:
    """(trigger, tokens before) of a ``compact_boundary`` line's ``compactMetadata``."""
    metadata = metadata if isinstance(metadata, dict) else {}
    trigger = metadata.get("trigger") if metadata.get("trigger") in ("manual", "auto") else ""
    before = metadata.get("preTokens")
    return str(trigger), before if isinstance(before, int) and before > 0 else 0


class TranscriptReader(JsonLines):
    """One transcript read as it grows: each :meth:`read` takes the complete lines written since
    the last one, so a file followed while its session runs is parsed once. A request is rebuilt
    from the shapes and messages of earlier lines, which the reader keeps while it lives."""

    def __init__(self, path: str, malformed: list[str] | None = None, start: int = 0) -> None:
        super().__init__(path, malformed, start)
        self._shapes: dict[str, Any] = {}
        self._blobs: dict[str, Any] = {}
        self._pending: dict[str, Any] | None = None  # the last api-request line without its answer yet
        self._response: dict[str, Any] | None = None
        self._history: list[dict[str, Any]] = []  # the conversation, for transcripts without api-request lines
        self._meta: dict[str, Any] = {}
        self._sent = _Sent([], [])  # the messages of the last rebuilt request
        self._answered = 0  # the offset after the last line of the answer being read
        self._written = os.path.getmtime(path)  # the time of a call whose lines carry none
        self._compacted: tuple[str, int] | None = None  # a compact_boundary before the call being read

    def last(self) -> tuple[TranscriptCall, int, bool] | None:
        """The call whose answer ends the lines read so far, its offset, and whether the answer is
        whole (it names its stop reason; else a later line may add blocks to it); None if none."""
        if self._response is None:
            return None
        return self._call()[0], self._answered, self._response.get("stop_reason") is not None

    def _call(self) -> tuple[TranscriptCall, _Sent | None]:
        """The call being read, and the messages of its rebuilt request (None if not rebuilt)."""
        response = self._response
        assert response is not None
        pending, rebuilt = self._pending, None
        if pending is not None:
            rebuilt = _rebuilt(pending, self._shapes, self._blobs, self._sent)
            key = str(pending.get("id") or response.get("id"))
            started = time_of(pending.get("timestamp")) or self._written
        else:
            key, started = "", time_of(self._meta.get("timestamp")) or self._written
        if rebuilt is not None:
            request, exact = rebuilt[0], True
        else:
            request = {"model": response.get("model", ""), "messages": list(self._history)}
            key, exact = key or f"{response.get('id')}:{self._answered}", False
        meta = self._meta
        session = str(meta.get("sessionId", ""))
        headers = {SESSION_HEADER: session, "user-agent": f"claude-cli/{meta.get('version') or '0'}"}
        call = TranscriptCall(request=request, response=dict(response), session=session, key=key,
                              started=started, headers=headers, exact=exact, cwd=str(meta.get("cwd", "")),
                              git_branch=str(meta.get("gitBranch", "")), compacted=self._compacted)
        return call, rebuilt[1] if rebuilt is not None else None

    def _finish(self) -> Iterator[tuple[TranscriptCall, int]]:
        """The call being read, now that a later line ends it."""
        if self._response is None:
            return
        call, messages = self._call()
        if messages is not None:
            self._sent = messages
        self._history.append({"role": "assistant", "content": self._response.get("content", [])})
        self._pending, self._response, self._compacted = None, None, None
        yield call, self._answered

    def take(self, line: dict[str, Any]) -> Iterator[tuple[TranscriptCall, int]]:
        kind = line.get("type")
        message = line.get("message")
        if kind == "api-request-shape":
            self._shapes[str(line.get("shapeHash", ""))] = line.get("shape")
        elif kind == "api-request-blob":
            self._blobs[str(line.get("hash", ""))] = line.get("message")
        elif kind == "api-request":
            yield from self._finish()
            self._pending = line
        elif kind == "system" and line.get("subtype") == COMPACT_BOUNDARY:
            yield from self._finish()
            self._compacted = _boundary(line.get("compactMetadata"))
            self._history = []  # the conversation goes on from the summary (the next user line)
        elif kind == "assistant" and isinstance(message, dict) and message.get("model") == SYNTHETIC:
            _remember(self._blobs, message)  # the CLI's own words, no model call
            self._history.append({"role": "assistant", "content": message.get("content", [])})
        elif kind == "assistant" and isinstance(message, dict):
            if self._response is not None and self._response.get("id") != message.get("id"):
                yield from self._finish()
            self._meta.update((k, line[k]) for k in _META if k in line)
            merged = self._response is not None or message.get("role") != "assistant"
            self._response = _merge(self._response, message)
            _remember(self._blobs, message)
            if merged:  # the answer's blocks so far (else the same as the line's own message)
                _remember(self._blobs, {"role": "assistant", "content": self._response.get("content", [])})
            self._answered = self.offset
        elif kind == "user" and isinstance(message, dict):
            yield from self._finish()
            self._meta.update((k, line[k]) for k in _META if k in line)
            _remember(self._blobs, message)
            if not line.get("isSidechain") or not self._history:
                self._history.append({"role": "user", "content": message.get("content", "")})


def transcript_calls(path: str, start: int = 0, malformed: list[str] | None = None
                     ) -> Iterator[tuple[TranscriptCall, int]]:
    """The model calls of one transcript file, each with the byte offset after its last line.
    Lines before ``start`` are read for shapes and messages but yield no call."""
    return TranscriptReader(path, malformed, start).to_end()
