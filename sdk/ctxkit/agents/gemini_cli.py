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
import os
import re
from collections.abc import Iterator
from typing import Any

from ctxkit.agents.transcripts import JsonLines, TranscriptCall, time_of

__all__ = ["INSTALLATION_HEADER", "SESSION_HEADER", "ChatReader", "is_gemini_cli", "is_summary", "memory_files",
           "session", "transcript_calls", "transcript_files", "transcripts_folder"]

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
        if "chats" in root[len(folder):].split(os.sep):
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


def _wire(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A user or gemini message as the CLI sends it: its role and parts (none for the rest)."""
    kind = message.get("type")
    if kind == "user":
        role, parts = "user", _parts(message.get("content"))
    elif kind == "gemini":
        role, parts = "model", _model_parts(message)
    else:  # info, error, warning: shown, never sent
        return "", []
    return role, [w for w in (_wire_part(p) for p in parts) if w is not None]


# A message's record, its role and parts as sent, and its content on its own (``{role, parts}``).
_Wired = tuple[Any, str, list[dict[str, Any]], dict[str, Any]]


def _contents(messages: list[dict[str, Any]], wired: dict[str, _Wired]) -> list[dict[str, Any]]:
    """The conversation as the CLI sends it: user and gemini messages as contents, consecutive
    ones of a role in one content (``wired``: each message's role, parts and content, by id, read
    once while the message is the same record). A content of one message is the same object in
    every request that sends it (the importer's mapping reads it once); none is changed after."""
    out: list[dict[str, Any]] = []
    for message in messages:
        known = wired.get(message["id"])
        if known is None or known[0] is not message:
            role, parts = _wire(message)
            known = wired[message["id"]] = (message, role, parts, {"role": role, "parts": parts})
        _, role, parts, content = known
        if not parts:
            continue
        if out and out[-1]["role"] == role:
            out[-1] = {"role": role, "parts": [*out[-1]["parts"], *parts]}
        else:
            out.append(content)
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


_FINAL = ("success", "error", "cancelled")  # a tool call's status once the CLI is done with it


class ChatReader(JsonLines):
    """One chat read as it grows: each :meth:`read` takes the complete records written since the
    last one, so a chat followed while its session runs is parsed once. A call's request is the
    conversation the reader holds when its gemini message first appears."""

    blank_lines_ok = True

    def __init__(self, path: str, malformed: list[str] | None = None, start: int = 0) -> None:
        super().__init__(path, malformed, start)
        self._messages: list[dict[str, Any]] = []  # the conversation as the CLI holds it
        self._where: dict[str, int] = {}  # message id -> its index in _messages
        self._wired: dict[str, _Wired] = {}  # message id -> (record, role, parts, content)
        self._meta: dict[str, Any] = {}
        self._pending: dict[str, Any] | None = None  # the last gemini message: request, started, record, offset
        self._called: set[str] = set()  # the gemini messages taken as calls
        self._cwd = _cwd(path)
        self._written = os.path.getmtime(path)  # the time of a call whose records carry none

    def last(self) -> tuple[TranscriptCall, int, bool] | None:
        """The call whose message ends the records read so far, its offset, and whether it is
        whole (its tool calls done; else a later record may add to it); None if none."""
        found = self._pending
        if found is None or not isinstance(found["record"].get("tokens"), dict):
            return None
        calls = found["record"].get("toolCalls")
        whole = bool(calls) and all(isinstance(c, dict) and c.get("status") in _FINAL for c in calls)
        return self._call(found), int(found["offset"]), whole

    def _call(self, found: dict[str, Any]) -> TranscriptCall:
        record = found["record"]
        session = str(self._meta.get("sessionId", ""))
        return TranscriptCall(request={"contents": found["request"]}, response=_answer(record), session=session,
                              key=str(record["id"]), started=found["started"],
                              headers={"user-agent": _PRODUCT, SESSION_HEADER: session},
                              path=f"/v1beta/models/{record.get('model') or ''}:generateContent", exact=False,
                              cwd=self._cwd)

    def _finish(self) -> Iterator[tuple[TranscriptCall, int]]:
        """The pending message as a call, now that a later record ends it (none for the CLI's own
        words, a gemini message without tokens such as a compression's "Got it.")."""
        found, self._pending = self._pending, None
        if found is not None and isinstance(found["record"].get("tokens"), dict):
            yield self._call(found), int(found["offset"])

    def _place(self, record: dict[str, Any]) -> None:
        index = self._where.get(record["id"])
        if index is not None:
            self._messages[index] = record
        else:
            self._where[record["id"]] = len(self._messages)
            self._messages.append(record)

    def _replace(self, kept: Any) -> None:
        self._messages = [m for m in kept if isinstance(m, dict) and isinstance(m.get("id"), str)] \
            if isinstance(kept, list) else []
        self._where = {m["id"]: i for i, m in enumerate(self._messages)}

    def take(self, record: dict[str, Any]) -> Iterator[tuple[TranscriptCall, int]]:
        update = record.get("$set")
        if self._pending is not None and record.get("id") != self._pending["record"]["id"] \
                and not (isinstance(update, dict) and "messages" not in update):
            yield from self._finish()
        if isinstance(record.get("$rewindTo"), str):
            self._replace(self._messages[:self._where.get(record["$rewindTo"], 0)])
        elif isinstance(update, dict):
            self._meta.update((k, v) for k, v in update.items() if k != "messages")
            if "messages" in update:
                self._replace(update["messages"])
        elif isinstance(record.get("id"), str):
            if record.get("type") == "gemini" and record["id"] not in self._called:
                self._called.add(record["id"])
                # Sent after the last message before it was written, answered when it was.
                own = time_of(record.get("timestamp")) or self._written
                sent = time_of(self._messages[-1].get("timestamp")) if self._messages else 0.0
                self._pending = {"request": _contents(self._messages, self._wired),
                                 "started": sent if 0 < sent <= own else own, "record": record, "offset": self.offset}
            elif self._pending is not None and record["id"] == self._pending["record"]["id"]:
                self._pending["record"], self._pending["offset"] = record, self.offset
            self._place(record)
        elif isinstance(record.get("sessionId"), str):  # a header: the session (re)starts
            self._meta.update((k, v) for k, v in record.items() if k != "messages")
            if isinstance(record.get("messages"), list):
                self._replace(record["messages"])


def transcript_calls(path: str, start: int = 0, malformed: list[str] | None = None
                     ) -> Iterator[tuple[TranscriptCall, int]]:
    """The model calls of one chat (each gemini message with ``tokens``), each with the byte
    offset after the last record of its message. Records before ``start`` are read for the
    conversation but yield no call."""
    return ChatReader(path, malformed, start).to_end()
