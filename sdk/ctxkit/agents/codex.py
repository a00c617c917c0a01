"""OpenAI Codex CLI's habits, as its requests show them (OpenAI Responses through a
``model_providers`` entry of ``$CODEX_HOME/config.toml``).

- Session: the ``session-id`` header (``session_id`` in earlier versions) of a client whose
  User-Agent names a Codex product (``codex_exec/0.171.0 (...)``, ``codex_cli_rs/...``).
- Memory files: each AGENTS.md goes in as a user message "# AGENTS.md instructions for <folder>".
- Summaries: when its history reaches ``model_auto_compact_token_limit`` (or on ``/compact``) it
  sends the history with :data:`COMPACTION_PROMPT` and no tools, then goes on with a new history:
  its instructions, the user messages it keeps, and a user message holding the answer after
  :data:`SUMMARY_PREFIX`, which stands after the kept messages, not first.
- Context it writes itself as user messages: ``<environment_context>`` (cwd, shell, date) and the
  AGENTS.md messages; they are not turns of the user. Its ``<cwd>`` is where the agent works.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

from ctxkit.agents.transcripts import JsonLines, TranscriptCall, time_of

__all__ = ["SESSION_HEADERS", "COMPACTION_PROMPT", "SUMMARY_PREFIX", "session", "is_summary", "is_context",
           "memory_files", "working_directory",
           "transcripts_folder", "transcript_files", "RolloutReader", "transcript_calls"]

SESSION_HEADERS = ("session-id", "session_id")
COMPACTION_PROMPT = (
    "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will "
    "resume the task.\n\nInclude:\n- Current progress and key decisions made\n- Important context, constraints, "
    "or user preferences\n- What remains to be done (clear next steps)\n- Any critical data, examples, or "
    "references needed to continue\n\nBe concise, structured, and focused on helping the next LLM seamlessly "
    "continue the work.\n")
SUMMARY_PREFIX = ("Another language model started to solve this problem and produced a summary of its "
                  "thinking process.")
_AGENTS_FILE = re.compile(r"\A# AGENTS\.md instructions for (\S[^\n]*)")
_CONTEXT = "<environment_context>"


def session(headers: dict[str, str]) -> str:
    """The session id a Codex client sends, ``""`` for any other client."""
    if not headers.get("user-agent", "").lower().startswith("codex"):
        return ""
    return next((headers[name].strip() for name in SESSION_HEADERS if headers.get(name, "").strip()), "")


def is_summary(head: str) -> bool:
    """Does this text (stripped at the left) open like Codex's compaction summary message?"""
    return head.startswith(SUMMARY_PREFIX)


_CWD = re.compile(r"<cwd>([^<\n]+)</cwd>")
_LOOK = 16  # the environment context comes with the first input items, after the instructions


def working_directory(request: dict[str, Any]) -> str:
    """The ``<cwd>`` of a request's environment context (a Responses ``input`` item), ``""`` without one."""
    items = request.get("input")
    for item in items[:_LOOK] if isinstance(items, list) else ():
        content = item.get("content") if isinstance(item, dict) and item.get("role") == "user" else None
        for block in content if isinstance(content, list) else ():
            text = block.get("text") if isinstance(block, dict) else None
            if isinstance(text, str) and text.lstrip().startswith(_CONTEXT):
                found = _CWD.search(text)
                return found.group(1).strip() if found else ""
    return ""


def is_context(head: str) -> bool:
    """Is this user text (stripped at the left) context Codex writes itself, not the user's turn?"""
    return head.startswith(_CONTEXT) or bool(_AGENTS_FILE.match(head))


def memory_files(head: str) -> list[str] | None:
    """The AGENTS.md a user text (stripped at the left) injects, by its path; None for any other."""
    found = _AGENTS_FILE.match(head)
    if not found:
        return None
    folder = found.group(1).strip()
    return [folder if folder.endswith("AGENTS.md") else f"{folder.rstrip('/')}/AGENTS.md"]


# Rollouts: $CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl, one {timestamp, type, payload}
# a line: ``session_meta`` (id, cwd, originator, cli_version, base_instructions, git),
# ``turn_context`` (model), ``response_item`` (the history as Codex keeps it: developer and user
# messages, the model's messages, reasoning and function calls, the functions' outputs),
# ``token_usage_record`` (one per model response: ``response_id``, ``usage``; earlier versions:
# only the ``token_count`` event's ``last_token_usage``, without the id), ``compacted`` (the
# summary and ``replacement_history``, the history after it). Each response becomes one call: its
# request is the base instructions as a developer message, then the history at the time of its
# first output item; its time is that of the line before that item (the last thing Codex wrote
# before it sent the request). A response whose output Codex marks ``compaction_output`` answered
# its compaction request: the history and :data:`COMPACTION_PROMPT`, no tools. The rollout keeps
# neither the tool definitions nor the base instructions exactly as sent (Codex trims them per
# model): ``exact`` is False.

_OUTPUTS = frozenset({"function_call", "custom_tool_call", "local_shell_call", "reasoning", "web_search_call",
                      "image_generation_call", "tool_search_call", "mcp_call"})
_UNSENT = frozenset({"ghost_snapshot"})  # kept in the rollout for undo, never sent


def transcripts_folder() -> str:
    """Where Codex keeps its rollouts (``$CODEX_HOME/sessions``, else ``~/.codex/sessions``)."""
    home = os.environ.get("CODEX_HOME") or os.path.join(os.path.expanduser("~"), ".codex")
    return os.path.join(home, "sessions")


def _cwd(path: str) -> str:
    """The working directory a rollout's ``session_meta`` (its first line) names, ``""`` without one."""
    try:
        with open(path, "rb") as handle:
            first = json.loads(handle.readline())
    except (OSError, ValueError):
        return ""
    payload = first.get("payload") if isinstance(first, dict) and first.get("type") == "session_meta" else None
    return str(payload.get("cwd") or "") if isinstance(payload, dict) else ""


def transcript_files(folder: str, project_dir: str = "") -> list[str]:
    """The rollouts under ``folder`` (those whose session ran in ``project_dir``, with it), oldest first."""
    found: list[str] = []
    for root, _dirs, names in os.walk(folder):
        found.extend(os.path.join(root, n) for n in names if n.startswith("rollout-") and n.endswith(".jsonl"))
    if project_dir:
        wanted = os.path.abspath(project_dir)
        found = [p for p in found if os.path.abspath(_cwd(p) or "/") == wanted]
    return sorted(found, key=lambda p: (os.path.getmtime(p), p))


def _item(payload: dict[str, Any]) -> dict[str, Any]:
    """A history item as sent (without Codex's own bookkeeping)."""
    return {k: v for k, v in payload.items() if k != "internal_chat_message_metadata_passthrough"}


def _is_output(item: dict[str, Any]) -> bool:
    return item.get("role") == "assistant" or item.get("type") in _OUTPUTS


def _message(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def _usage(recorded: Any) -> dict[str, Any]:
    """A ``token_usage_record``'s usage in the Responses API's shape."""
    u = recorded if isinstance(recorded, dict) else {}

    def count(key: str) -> int:
        value = u.get(key)
        return value if isinstance(value, int) else 0

    details: dict[str, int] = {"cached_tokens": count("cached_input_tokens")}
    if count("cache_write_input_tokens"):
        details["cache_write_tokens"] = count("cache_write_input_tokens")
    return {"input_tokens": count("input_tokens"), "input_tokens_details": details,
            "output_tokens": count("output_tokens"),
            "output_tokens_details": {"reasoning_tokens": count("reasoning_output_tokens")},
            "total_tokens": count("total_tokens") or count("input_tokens") + count("output_tokens")}


def _after_compaction(payload: dict[str, Any], history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history a ``compacted`` line leaves: its ``replacement_history``, else (earlier
    versions) the messages of the instructions and the user, then the summary as a user message."""
    replacement = payload.get("replacement_history")
    if isinstance(replacement, list):
        return [_item(i) for i in replacement if isinstance(i, dict) and i.get("type") not in _UNSENT]
    kept = [i for i in history if i.get("type") == "message" and i.get("role") in ("developer", "user")]
    return [*kept, _message("user", str(payload.get("message") or ""))]


class RolloutReader(JsonLines):
    """One rollout read as it grows: each :meth:`read` takes the complete lines written since the
    last one (``ctxkit watch`` parses each line once), keeping the history its lines built. A call
    ends with its ``token_usage_record``, so every call it yields is whole."""

    def __init__(self, path: str, malformed: list[str] | None = None, start: int = 0) -> None:
        super().__init__(path, malformed, start)
        self._meta: dict[str, Any] = {}
        self._head: list[dict[str, Any]] = []  # the base instructions as the developer message sent first
        self._model = ""
        self._history: list[dict[str, Any]] = []
        self._request: dict[str, Any] | None = None  # the request of the response being answered
        self._output: list[dict[str, Any]] = []
        self._fed = False  # an input item came after this response's output: a later output is a new response
        self._before = 0.0  # the time of the line before this one: about when a request that follows it went out
        self._started = 0.0
        self._written = os.path.getmtime(path)  # the time of a call whose lines carry none

    def last(self) -> tuple[TranscriptCall, int, bool] | None:
        """None: a call is yielded when its record ends it, never before."""
        return None

    def _sent(self, compaction: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self._model, "input": [*self._head, *self._history], "stream": True}
        if compaction:
            body["input"].append(_message("user", COMPACTION_PROMPT))
            body["tools"] = []
        return body

    def take(self, line: dict[str, Any]) -> Iterator[tuple[TranscriptCall, int]]:
        payload = line.get("payload")
        if not isinstance(payload, dict):
            return
        kind = line.get("type")
        stamp, self._before = self._before, time_of(line.get("timestamp")) or self._before
        if kind == "session_meta":
            self._meta = payload
            base = payload.get("base_instructions")
            text = base.get("text") if isinstance(base, dict) else base
            self._head = [_message("developer", text)] if isinstance(text, str) and text else []
        elif kind == "turn_context":
            self._model = str(payload.get("model") or self._model)
        elif kind == "response_item" and payload.get("type") not in _UNSENT:
            item = _item(payload)
            compaction = bool((line.get("metadata") or {}).get("compaction_output"))
            if _is_output(item):
                if self._request is None or self._fed:  # a response without a token_usage_record ended (aborted)
                    self._request, self._output, self._fed, self._started = self._sent(compaction), [], False, stamp
                self._output.append(item)
                if compaction:  # the summary goes into the history through the compacted line
                    return
            elif self._request is not None:
                self._fed = True
            self._history.append(item)
        elif kind == "compacted":
            self._history = _after_compaction(payload, self._history)
            self._request, self._output, self._fed = None, [], False
        elif kind == "token_usage_record" or (kind == "event_msg" and payload.get("type") == "token_count"
                                              and self._request is not None):
            # Earlier versions write no token_usage_record: their token_count event (which
            # 0.171.0 writes after the record, when no response is pending) ends the response.
            info = payload.get("info")
            usage = payload.get("usage") if kind == "token_usage_record" else \
                info.get("last_token_usage") if isinstance(info, dict) else None
            if kind != "token_usage_record" and not isinstance(usage, dict):
                return
            if self._request is None:
                self._request, self._started = self._sent(False), stamp
            meta = self._meta
            response_id = str(payload.get("response_id") or "")
            response = {"id": response_id, "object": "response", "model": self._model, "status": "completed",
                        "output": self._output, "usage": _usage(usage)}
            session = str(meta.get("id") or meta.get("session_id") or payload.get("session_id") or "")
            git = meta.get("git")
            git = git if isinstance(git, dict) else {}
            call = TranscriptCall(
                request=self._request, response=response, session=session,
                key=response_id or f"line-{self._lines}", started=self._started or self._written, exact=False,
                cwd=str(meta.get("cwd") or ""), git_branch=str(git.get("branch") or ""),
                headers={"user-agent": f"{meta.get('originator') or 'codex'}/{meta.get('cli_version') or '0'}",
                         SESSION_HEADERS[0]: session})
            self._request, self._output, self._fed = None, [], False
            yield call, self.offset


def transcript_calls(path: str, start: int = 0, malformed: list[str] | None = None
                     ) -> Iterator[tuple[TranscriptCall, int]]:
    """The model calls of one rollout, each with the byte offset after its ``token_usage_record``.
    Lines before ``start`` are read for the history but yield no call."""
    return RolloutReader(path, malformed, start).to_end()
