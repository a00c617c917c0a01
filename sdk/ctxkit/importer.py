"""``ctxkit import``: agents' session transcripts on disk as manifests, through the proxy's mapping.

Each model call in a Claude Code transcript (``~/.claude/projects/<project>/<session>.jsonl``)
becomes one :class:`~ctxkit.proxy.capture.Exchange` as the proxy would have forwarded it: the
request rebuilt from the transcript and the assistant message (with its ``usage``) as the
response. The exchanges go through the proxy's :class:`~ctxkit.proxy.capture.Capture` (the same
provider and agent modules, run placement, compactions and secret masking), so a call gives the
same items whether it was captured live or imported.

- Claude Code 2.1.332 and later write the request itself: ``api-request-shape`` (system, tools),
  ``api-request-blob`` (one message by its hash) and ``api-request`` per call (parameters, the
  blob hashes of its messages in ``tail``, the ``cache_control`` paths in ``cacheControl``). The
  rebuilt request is the one sent.
- Older transcripts hold only ``user`` / ``assistant`` lines: the request is the conversation so
  far, without system prompt and tools, and the manifest says so in a warning
  (:data:`NOT_ITEMISED`).

A call's id is derived from its session and request (a uuid5), so importing twice stores each
call once. A small state file (``<spool folder>/import-state.json``) remembers how far each file
was read; a rerun starts there. A line that is not JSON is reported with its file and line
number and skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ctxkit.agents import claude_code
from ctxkit.manifest import Builder
from ctxkit.providers import anthropic
from ctxkit.proxy.capture import Capture, Exchange
from ctxkit.version import __version__

__all__ = ["ANTHROPIC_API", "NOT_ITEMISED", "Summary", "TranscriptCall", "claude_code_calls", "default_claude_dir",
           "import_claude_code"]

ANTHROPIC_API = anthropic.MESSAGES
NOT_ITEMISED = ("imported from a transcript without the request: system prompt and tools not itemised")
SYNTHETIC = "<synthetic>"  # the model Claude Code names on assistant lines it wrote itself
_NAMESPACE = uuid.UUID("6f1d8f0e-3c52-4d7a-9a57-2f4d0c0b7e11")  # call ids of imported calls


@dataclass
class TranscriptCall:
    """One model call read from a transcript: the request as sent and the response as answered."""

    request: dict[str, Any]
    response: dict[str, Any]
    session: str
    key: str  # what makes the call unique in its session (the api-request id, else the message id and line)
    started: float
    version: str = ""
    exact: bool = True  # the transcript held the request itself
    cwd: str = ""
    git_branch: str = ""


@dataclass
class Summary:
    files: int = 0
    sessions: set[str] = field(default_factory=set)
    calls: int = 0
    skipped: int = 0  # files or lines already imported
    malformed: list[str] = field(default_factory=list)  # "file:line: why"

    def line(self) -> str:
        text = (f"sessions={len(self.sessions)} calls={self.calls} skipped={self.skipped} "
                f"malformed={len(self.malformed)}")
        return text


def default_claude_dir() -> str:
    return os.path.join(os.path.expanduser("~"), ".claude", "projects")


def _time(stamp: Any) -> float:
    if isinstance(stamp, str) and stamp:
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def _set_path(request: dict[str, Any], path: list[Any], value: Any) -> None:
    """Put ``value`` as ``cache_control`` at ``path`` (keys and indexes) of the request."""
    node: Any = request
    for step in path:
        if isinstance(node, dict) and isinstance(step, str) and step in node:
            node = node[step]
        elif isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node):
            node = node[step]
        else:
            return
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


def _rebuilt(line: dict[str, Any], shapes: dict[str, Any], blobs: dict[str, Any],
             previous: list[Any]) -> dict[str, Any] | None:
    """The request of an ``api-request`` line (its messages: the first ``keep`` of the previous
    request's, then those its ``tail`` names), or None when its shape or a message is missing."""
    shape = shapes.get(line.get("shapeHash", ""))
    tail = line.get("tail")
    if not isinstance(shape, dict) or not isinstance(tail, list) or any(h not in blobs for h in tail):
        return None
    params = {k: v for k, v in (line.get("params") or {}).items() if k != "betas"}  # betas go in a header
    request: dict[str, Any] = {**params}
    if shape.get("system") is not None:
        request["system"] = json.loads(json.dumps(shape["system"]))
    if shape.get("tools") is not None:
        request["tools"] = json.loads(json.dumps(shape["tools"]))
    keep = line.get("keep")
    kept = previous[:keep] if isinstance(keep, int) and keep > 0 else []
    request["messages"] = [*json.loads(json.dumps(kept)), *(json.loads(json.dumps(blobs[h])) for h in tail)]
    previous[:] = json.loads(json.dumps(request["messages"]))
    for mark in line.get("cacheControl") or []:
        if isinstance(mark, dict) and isinstance(mark.get("path"), list):
            _set_path(request, mark["path"], mark.get("value"))
    request["messages"] = [_wire(m) for m in request["messages"]]
    return request


def _forms(message: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The shapes a transcript's message may have had on the wire (its role and content as
    written, a text content as one text block, the line's whole message)."""
    content = message.get("content")
    yield {"role": message.get("role"), "content": content}
    if isinstance(content, str):
        yield {"role": message.get("role"), "content": [{"type": "text", "text": content}]}
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


def claude_code_calls(path: str, start: int = 0, malformed: list[str] | None = None
                      ) -> Iterator[tuple[TranscriptCall, int]]:
    """The model calls of one transcript file, each with the byte offset after its last line.
    Lines before ``start`` are read for shapes and messages but yield no call."""
    shapes: dict[str, Any] = {}
    blobs: dict[str, Any] = {}
    pending: dict[str, Any] | None = None  # the last api-request line without its answer yet
    response: dict[str, Any] | None = None
    history: list[dict[str, Any]] = []  # the conversation, for transcripts without api-request lines
    meta: dict[str, Any] = {}
    sent: list[Any] = []  # the messages of the last rebuilt request, as the transcript holds them
    offset = 0
    finished_at = 0
    written = os.path.getmtime(path)  # the time of a call whose lines carry none

    def finish() -> TranscriptCall | None:
        nonlocal pending, response
        if response is None:
            return None
        if pending is not None:
            request = _rebuilt(pending, shapes, blobs, sent)
            key = str(pending.get("id") or response.get("id"))
            started = _time(pending.get("timestamp")) or written
            exact = request is not None
        else:
            request, key, started, exact = None, "", _time(meta.get("timestamp")) or written, False
        if request is None:
            request = {"model": response.get("model", ""), "messages": json.loads(json.dumps(history))}
            key = key or f"{response.get('id')}:{offset}"
        call = TranscriptCall(request=request, response=response, session=str(meta.get("sessionId", "")), key=key,
                              started=started, version=str(meta.get("version", "")), exact=exact,
                              cwd=str(meta.get("cwd", "")), git_branch=str(meta.get("gitBranch", "")))
        history.append({"role": "assistant", "content": response.get("content", [])})
        pending, response = None, None
        return call

    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            offset += len(raw)
            if not raw.endswith(b"\n"):  # a line still being written (or cut): read it next time
                if malformed is not None and raw.strip():
                    malformed.append(f"{path}:{number}: truncated line")
                offset -= len(raw)
                break
            try:
                line = json.loads(raw)
            except ValueError:
                if malformed is not None and offset > start:
                    malformed.append(f"{path}:{number}: not JSON")
                continue
            if not isinstance(line, dict):
                continue
            kind = line.get("type")
            if kind == "api-request-shape":
                shapes[str(line.get("shapeHash", ""))] = line.get("shape")
            elif kind == "api-request-blob":
                blobs[str(line.get("hash", ""))] = line.get("message")
            elif kind == "api-request":
                call = finish()
                if call is not None and finished_at > start:
                    yield call, finished_at
                pending = line
            elif kind == "assistant" and isinstance(line.get("message"), dict) \
                    and line["message"].get("model") == SYNTHETIC:  # the CLI's own words, no model call
                _remember(blobs, line["message"])
                history.append({"role": "assistant", "content": line["message"].get("content", [])})
            elif kind == "assistant" and isinstance(line.get("message"), dict):
                message = line["message"]
                if response is not None and response.get("id") != message.get("id"):
                    call = finish()
                    if call is not None and finished_at > start:
                        yield call, finished_at
                meta = {**meta, **{k: line[k] for k in ("sessionId", "version", "cwd", "gitBranch", "timestamp")
                                   if k in line}}
                response = _merge(response, message)
                _remember(blobs, message)
                _remember(blobs, {"role": "assistant", "content": response.get("content", [])})
                finished_at = offset
            elif kind == "user" and isinstance(line.get("message"), dict):
                call = finish()
                if call is not None and finished_at > start:
                    yield call, finished_at
                meta = {**meta, **{k: line[k] for k in ("sessionId", "version", "cwd", "gitBranch", "timestamp")
                                   if k in line}}
                _remember(blobs, line["message"])
                if not line.get("isSidechain") or not history:
                    history.append({"role": "user", "content": line["message"].get("content", "")})
    call = finish()
    if call is not None and finished_at > start:
        yield call, finished_at


def exchange_of(call: TranscriptCall) -> Exchange:
    """The exchange the proxy would have seen for a call."""
    headers = {claude_code.SESSION_HEADER: call.session, "user-agent": f"claude-cli/{call.version or __version__}"}
    return Exchange(api=ANTHROPIC_API, request_body=json.dumps(call.request).encode(), headers=headers,
                    started=call.started, status=200, content_type="application/json",
                    chunks=[json.dumps(call.response).encode()])  # the path tells nothing more for Anthropic


def _files(folder: str, project_dir: str) -> list[str]:
    if project_dir:  # Claude Code names a project's folder by its path, "/" as "-"
        wanted = os.path.abspath(project_dir).replace("/", "-").replace(".", "-")
        folder = os.path.join(folder, wanted)
    found: list[str] = []
    for root, _dirs, names in os.walk(folder):
        found.extend(os.path.join(root, n) for n in names if n.endswith(".jsonl"))
    return sorted(found, key=lambda p: (os.path.getmtime(p), p))


def _load_state(path: str) -> dict[str, int]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}


def _save_state(path: str, state: dict[str, int]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
    os.replace(temporary, path)


def import_claude_code(folder: str, sink: Any, *, state_path: str = "", since: float = 0.0, project_dir: str = "",
                       include_text: bool = True, progress: bool = False) -> Summary:
    """Send each new call of the transcripts under ``folder`` to ``sink`` (``capture(manifest)``)."""
    summary = Summary()
    state = _load_state(state_path) if state_path else {}
    capture = Capture(sink, include_text=include_text)
    files = _files(folder, project_dir)
    for number, path in enumerate(files, start=1):
        summary.files += 1
        size = os.path.getsize(path)
        start = state.get(path, 0)
        if start >= size or os.path.getmtime(path) < since:
            summary.skipped += 1
            continue
        for call, end in claude_code_calls(path, start, summary.malformed):
            if call.started and call.started < since:
                continue
            manifest = capture.build(exchange_of(call))
            if manifest is None:
                continue
            manifest.call_id = uuid.uuid5(_NAMESPACE, f"{call.session}\0{call.key}").hex
            manifest.builder = Builder(name="ctxkit.import", version=__version__)
            if not call.exact:
                manifest.warnings = [*manifest.warnings, NOT_ITEMISED][:100]
            sink.capture(manifest)
            summary.calls += 1
            summary.sessions.add(call.session)
            state[path] = end
        if progress:
            print(f"\r{number}/{len(files)} files, {summary.calls} calls", end="", file=sys.stderr, flush=True)
        if state_path:
            _save_state(state_path, state)
    if progress:
        print(file=sys.stderr)
    return summary
