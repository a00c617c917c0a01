"""What an agent's transcript reader yields: one model call as the agent sent it.

Each agent module that reads its own session files (``claude_code``, ``codex``, ``gemini_cli``)
yields :class:`TranscriptCall` values; ``ctxkit.importer`` turns each into the exchange the proxy
would have seen, so an imported call gives the same manifest as one captured live.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

__all__ = ["Reader", "TranscriptCall", "time_of"]


@dataclass
class TranscriptCall:
    """One model call read from a transcript: the request as sent and the response as answered."""

    request: dict[str, Any]
    response: dict[str, Any]
    session: str
    key: str  # what makes the call unique in its session (the provider's response id where written)
    started: float  # seconds since the epoch
    headers: dict[str, str] = field(default_factory=dict)  # identity headers as the agent sends them
    path: str = ""  # the request's URL path where it says more than the body (Gemini: the model)
    exact: bool = True  # the transcript held the request itself (else system prompt and tools are missing)
    cwd: str = ""
    git_branch: str = ""
    # A compaction the transcript records just before this call: (trigger ``manual`` / ``auto`` /
    # ``""``, the tokens before it as the agent counted them; 0 unknown). The compaction's own
    # summary request is a call the transcript does not keep.
    compacted: tuple[str, int] | None = None


def time_of(stamp: Any) -> float:
    """Seconds since the epoch of an ISO 8601 time as agents write them, 0.0 when there is none."""
    if isinstance(stamp, str) and stamp:
        try:
            return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


class Reader(Protocol):
    """One transcript read as it grows (``ctxkit watch``): each read parses only the lines
    written since the last one."""

    offset: int  # bytes of the file read

    def read(self) -> Iterator[tuple[TranscriptCall, int]]:
        """The calls the lines written since the last read complete, each with the byte offset
        after its last line."""
        ...

    def last(self) -> tuple[TranscriptCall, int, bool] | None:
        """The call whose answer ends what was read, its offset, and whether that answer is whole
        (else a later line may add to it); None when the lines read end otherwise."""
        ...


class JsonLines(ABC):
    """A JSON-lines file read as it grows: :meth:`read` takes the complete lines written since the
    last read (a line still being written is left for the next), parses each once and hands the
    objects to :meth:`take`; a line that is not JSON is reported in ``malformed`` as file:line,
    unless it ends before ``start`` (an earlier reader reported it)."""

    blank_lines_ok = False  # a blank line is skipped silently rather than reported

    def __init__(self, path: str, malformed: list[str] | None = None, start: int = 0) -> None:
        self.path = path
        self.offset = 0  # bytes of complete lines read
        self.malformed = malformed
        self._report_from = start
        self._lines = 0

    def read(self) -> Iterator[tuple[TranscriptCall, int]]:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            for raw in handle:
                if not raw.endswith(b"\n"):
                    break
                self.offset += len(raw)
                self._lines += 1
                try:
                    found = json.loads(raw)
                except ValueError:
                    if self.malformed is not None and self.offset > self._report_from \
                            and (raw.strip() or not self.blank_lines_ok):
                        self.malformed.append(f"{self.path}:{self._lines}: not JSON")
                    continue
                if isinstance(found, dict):
                    yield from self.take(found)

    @abstractmethod
    def take(self, line: dict[str, Any]) -> Iterator[tuple[TranscriptCall, int]]:
        """The calls one parsed line completes, each with the byte offset after its last line."""

    @abstractmethod
    def last(self) -> tuple[TranscriptCall, int, bool] | None:
        """The call whose answer ends what was read (see :class:`Reader`)."""

    def to_end(self) -> Iterator[tuple[TranscriptCall, int]]:
        """The file's calls as it is now, the last one too (whole or not), each with its end offset;
        only those that end after ``start`` (earlier lines are read for what later ones refer to).
        A last line cut before its newline is reported in ``malformed``."""
        for call, end in self.read():
            if end > self._report_from:
                yield call, end
        last = self.last()
        if last is not None and last[1] > self._report_from:
            yield last[0], last[1]
        cut = self.cut()
        if cut and self.malformed is not None:
            self.malformed.append(cut)

    def cut(self) -> str:
        """What is left of a last line without its newline (one being written, or cut)."""
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            return f"{self.path}:{self._lines + 1}: truncated line" if handle.read(1).strip() else ""
