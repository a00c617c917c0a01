"""Gemini CLI's habits, as its requests show them (the Gemini API through ``GOOGLE_GEMINI_BASE_URL``).

- It names itself in its User-Agent (``GeminiCLI/0.61.0/<model> (...)``, ``GeminiCLI-tui/...``).
- Session: it sends no session id. Every call of a session, the turns and the side requests
  it makes on a small model (routing, next-speaker checks), opens its contents with the same
  ``<session_context>`` text (date, OS, workspace folders and their listing), and every call
  carries the installation's id (``x-gemini-api-privileged-user-id``): the two together name
  the session. Two sessions started in the same folder on the same day, with the folder
  unchanged, are one run unless ``X-Ctxview-Run`` tells them apart.
- Memory files: its GEMINI.md files go into that session context, each between
  ``--- Context from: <path> ---`` and ``--- End of Context from: <path> ---``.
- Summaries: its compression (``/compress``, or its own when the last prompt passes
  ``model.compressionThreshold`` of the window) asks a model for a ``<state_snapshot>`` and
  continues with the session context, the snapshot (in the same user content) and the model's
  "Got it." before the turns it keeps.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from ctxkit.agents.transcripts import TranscriptCall, time_of

__all__ = ["INSTALLATION_HEADER", "SESSION_HEADER", "is_gemini_cli", "is_summary", "memory_files", "session",
           "transcript_calls", "transcript_files", "transcripts_folder"]

INSTALLATION_HEADER = "x-gemini-api-privileged-user-id"
# The CLI sends no session id; a chat file names its session, and ctxkit import passes it in this header.
SESSION_HEADER = "x-gemini-cli-session-id"
_PRODUCT = "GeminiCLI"
_CONTEXT = "<session_context>"
_SNAPSHOT = ("<state_snapshot>", "</state_snapshot>")
_FILE = re.compile(r"^--- Context from: (\S[^\n]*?) ---$", re.MULTILINE)


def is_gemini_cli(headers: dict[str, str]) -> bool:
    return headers.get("user-agent", "").startswith(_PRODUCT)


def session(headers: dict[str, str], first_text: str) -> str:
    """The session id: the one an imported chat file names, else a hash of the installation id
    and the session context its first user text opens with; ``""`` for another client or a call
    without one."""
    if not is_gemini_cli(headers):
        return ""
    named = headers.get(SESSION_HEADER, "").strip()
    if named:
        return named
    if not first_text.lstrip().startswith(_CONTEXT):
        return ""
    context = first_text.lstrip().split("</session_context>", 1)[0]
    seed = f"{headers.get(INSTALLATION_HEADER, '')}\x1f{context}"
    return "gemini-" + hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def memory_files(head: str) -> list[str] | None:
    """The GEMINI.md files a user text (stripped at the left) injects when it is the session
    context holding them, by their paths; None for any other text."""
    if not head.startswith(_CONTEXT):
        return None
    return _FILE.findall(head) or None


def is_summary(text: str) -> bool:
    """Is this text (stripped) a compression's snapshot? The model may reason before it; it ends
    with the closing tag."""
    return _SNAPSHOT[0] in text and text.rstrip().endswith(_SNAPSHOT[1])


# Chats: <home>/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl (a sub-agent's under
# chats/<parent session>/), <home> being $GEMINI_CLI_HOME or the home directory, <project> the
# short name ~/.gemini/projects.json gives the project root (which <project>/.project_root holds),
# formerly the SHA-256 of the root (the header's projectHash). One JSON record a line, appended:
# - a header (sessionId, projectHash, startTime, lastUpdated, kind), again on each resume;
# - a message (``id``, ``timestamp``, ``type`` user / gemini / info / error / warning, ``content``
#   as parts or a string; a gemini message's ``tokens``: input, output, cached, thoughts, tool,
#   total, its ``model``, ``thoughts``, ``toolCalls`` with their ``result``); a record with the
#   id of an earlier one replaces it (the tool calls are added to their message that way);
# - ``{"$set": {...}}``: metadata; with ``messages``, the whole conversation replaced by the
#   history the CLI holds (on resume, and after a compression, whose history opens with the
#   snapshot);
# - ``{"$rewindTo": id}``: that message and the ones after it dropped.
# The chat does not keep the system instruction, the tool declarations or the generation config,
# nor a response id: a call is rebuilt from the conversation before it (``exact`` False).

_PREFIX = "session-"
_ROOT_FILE = ".project_root"


def transcripts_folder() -> str:
    """Where Gemini CLI keeps its projects' chats (``$GEMINI_CLI_HOME/.gemini/tmp``, else ``~/.gemini/tmp``)."""
    home = os.environ.get("GEMINI_CLI_HOME") or os.path.expanduser("~")
    return os.path.join(home, ".gemini", "tmp")


def _project_root(folder: str) -> str:
    try:
        with open(os.path.join(folder, _ROOT_FILE), encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def transcript_files(folder: str, project_dir: str = "") -> list[str]:
    """The chats under ``folder`` (one project's with ``project_dir``: the folder whose
    ``.project_root`` names it, or named by its hash), oldest first."""
    wanted = os.path.abspath(project_dir) if project_dir else ""
    digest = hashlib.sha256(wanted.encode()).hexdigest() if wanted else ""
    found: list[str] = []
    for root, dirs, names in os.walk(folder):
        if root == folder and wanted:
            dirs[:] = [d for d in dirs if d == digest or _project_root(os.path.join(root, d)) == wanted]
        if os.sep + "chats" in root[len(folder):]:
            found.extend(os.path.join(root, n) for n in names if n.endswith(".jsonl"))
    return sorted(found, key=lambda p: (os.path.getmtime(p), p))


def _parts(content: Any) -> list[dict[str, Any]]:
    """A message's content as parts (the chat keeps a lone text as a string)."""
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, dict):
        return [content]
    if isinstance(content, list):
        return [{"text": p} if isinstance(p, str) else p for p in content if isinstance(p, str | dict)]
    return []


def _wire_part(part: dict[str, Any]) -> dict[str, Any] | None:
    """A part as the CLI sends it: a tool call's id without the ``<name>__`` the CLI prefixes it
    with, no empty text; None for a part left out."""
    for key in ("functionCall", "functionResponse"):
        inner = part.get(key)
        if isinstance(inner, dict) and isinstance(inner.get("id"), str):
            name = str(inner.get("name") or "").strip() or "generic_tool"
            if inner["id"].startswith(f"{name}__"):
                part = {**part, key: {**inner, "id": inner["id"][len(name) + 2:]}}
    if part.get("text") == "":
        part = {k: v for k, v in part.items() if k != "text"}
        if not any(k not in ("thought", "callIndex") for k in part):
            return None
    return part or None


def _tool_call_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("toolCalls")
    return [{"functionCall": {"id": c.get("id"), "name": c.get("name"), "args": c.get("args")}}
            for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _model_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A gemini message as history: its content, and its tool calls unless the content holds them
    (the CLI's history form, in a ``$set``)."""
    parts = _parts(message.get("content"))
    if any("functionCall" in p for p in parts):
        return parts
    return [*parts, *_tool_call_parts(message)]


def _contents(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as the CLI sends it: user and gemini messages as contents, consecutive
    ones of a role in one content."""
    out: list[dict[str, Any]] = []
    for message in messages:
        kind = message.get("type")
        if kind == "user":
            role, parts = "user", _parts(message.get("content"))
        elif kind == "gemini":
            role, parts = "model", _model_parts(message)
        else:  # info, error, warning: shown, never sent
            continue
        wire = [w for w in (_wire_part(p) for p in parts) if w is not None]
        if not wire:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(wire)
        else:
            out.append({"role": role, "parts": wire})
    return out


def _answer(message: dict[str, Any]) -> dict[str, Any]:
    """A gemini message as the model's answer: its thoughts, text and tool calls, the usage its
    ``tokens`` recorded (the prompt count includes the cached tokens, as the API reports it)."""
    thoughts = [{"text": f"**{t['subject']}** {t.get('description', '')}" if t.get("subject")
                 else str(t.get("description", "")), "thought": True}
                for t in message.get("thoughts") or [] if isinstance(t, dict)]
    parts = [*thoughts, *(w for w in (_wire_part(p) for p in _model_parts(message)) if w is not None)]
    found = message.get("tokens")
    tokens: dict[str, Any] = found if isinstance(found, dict) else {}
    usage = {"promptTokenCount": tokens.get("input", 0), "candidatesTokenCount": tokens.get("output", 0)}
    for name, key in (("cached", "cachedContentTokenCount"), ("thoughts", "thoughtsTokenCount"),
                      ("tool", "toolUsePromptTokenCount"), ("total", "totalTokenCount")):
        if tokens.get(name):
            usage[key] = tokens[name]
    answer: dict[str, Any] = {"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
                              "usageMetadata": usage}
    if message.get("model"):
        answer["modelVersion"] = message["model"]
    if message.get("responseId"):
        answer["responseId"] = message["responseId"]
    return answer


def _cwd(path: str) -> str:
    """The project root of a chat: ``.project_root`` in its project's folder (above ``chats``)."""
    folder = os.path.dirname(path)
    while os.path.basename(folder) != "chats" and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return _project_root(os.path.dirname(folder))


def transcript_calls(path: str, start: int = 0, malformed: list[str] | None = None
                     ) -> Iterator[tuple[TranscriptCall, int]]:
    """The model calls of one chat (each gemini message with ``tokens``), each with the byte
    offset after the last record of its message. Records before ``start`` are read for the
    conversation but yield no call."""
    messages: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    pending: dict[str, Any] | None = None  # the last gemini message: id, request, started, record, offset after it
    called: set[str] = set()  # the gemini messages taken as calls
    offset = 0
    cwd = _cwd(path)
    written = os.path.getmtime(path)  # the time of a call whose records carry none

    def finish() -> tuple[TranscriptCall | None, int]:
        """The pending message as a call (None when it is not one), and the offset after it."""
        nonlocal pending
        found, pending = pending, None
        if found is None or not isinstance(found["record"].get("tokens"), dict):
            return None, 0  # the CLI's own words (a compression's "Got it."), no model call
        record = found["record"]
        session = str(meta.get("sessionId", ""))
        model = str(record.get("model") or "")
        call = TranscriptCall(request={"contents": found["request"]}, response=_answer(record), session=session,
                              key=str(record["id"]), started=found["started"],
                              headers={"user-agent": _PRODUCT, SESSION_HEADER: session},
                              path=f"/v1beta/models/{model}:generateContent", exact=False, cwd=cwd)
        return call, int(found["offset"])

    def place(record: dict[str, Any]) -> None:
        for index, message in enumerate(messages):
            if message.get("id") == record["id"]:
                messages[index] = record
                return
        messages.append(record)

    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            offset += len(raw)
            if not raw.endswith(b"\n"):  # a record still being written (or cut): read it next time
                if malformed is not None and raw.strip():
                    malformed.append(f"{path}:{number}: truncated line")
                offset -= len(raw)
                break
            try:
                record = json.loads(raw)
            except ValueError:
                if malformed is not None and offset > start and raw.strip():
                    malformed.append(f"{path}:{number}: not JSON")
                continue
            if not isinstance(record, dict):
                continue
            update = isinstance(record.get("$set"), dict) and "messages" not in record["$set"]
            if pending is not None and record.get("id") != pending["id"] and not update:
                call, done = finish()
                if call is not None and done > start:
                    yield call, done
            if isinstance(record.get("$rewindTo"), str):
                ids = [m.get("id") for m in messages]
                del messages[ids.index(record["$rewindTo"]) if record["$rewindTo"] in ids else 0:]
            elif isinstance(record.get("$set"), dict):
                meta = {**meta, **{k: v for k, v in record["$set"].items() if k != "messages"}}
                if isinstance(record["$set"].get("messages"), list):
                    messages = [m for m in record["$set"]["messages"] if isinstance(m, dict) and "id" in m]
            elif isinstance(record.get("id"), str):
                if record.get("type") == "gemini" and record["id"] not in called:
                    called.add(record["id"])
                    # Sent after the last message before it was written, answered when it was.
                    own = time_of(record.get("timestamp")) or written
                    sent = time_of(messages[-1].get("timestamp")) if messages else 0.0
                    pending = {"id": record["id"], "request": _contents(messages),
                               "started": sent if 0 < sent <= own else own}
                if pending is not None and record["id"] == pending["id"]:
                    pending["record"], pending["offset"] = record, offset
                place(record)
            elif isinstance(record.get("sessionId"), str):  # a header: the session (re)starts
                meta = {**meta, **{k: v for k, v in record.items() if k != "messages"}}
                if isinstance(record.get("messages"), list):
                    messages = [m for m in record["messages"] if isinstance(m, dict) and "id" in m]
    call, done = finish()
    if call is not None and done > start:
        yield call, done
