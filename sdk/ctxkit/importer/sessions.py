"""``ctxkit import``: agents' session transcripts on disk as manifests, through the proxy's mapping.

Each agent module that knows its transcripts (``ctxkit.agents.claude_code``, ...) reads them into
:class:`~ctxkit.agents.transcripts.TranscriptCall` values: the request as the agent sent it and
the response as answered. Each becomes one :class:`~ctxkit.proxy.capture.Exchange` as the proxy
would have forwarded it, and goes through the proxy's :class:`~ctxkit.proxy.capture.Capture` (the
same provider and agent modules, run placement, compactions and secret masking), so a call gives
the same items whether it was captured live or imported. Where a transcript holds only the
messages, the manifest says in a warning (:data:`NOT_ITEMISED`) that system prompt and tools are
missing.

A call's id is the provider's id of its response, as the proxy gives it (a call captured live
and imported later is stored once); a transcript that does not record it gets an id derived
from its session and key. Either way, importing twice stores each call once. A
small state file remembers how far each file was read; a rerun starts there. A line that is not
JSON is reported with its file and line number and skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ctxkit.agents import claude_code, codex, gemini_cli
from ctxkit.agents.transcripts import Reader, TranscriptCall
from ctxkit.manifest import Builder, Compaction, Manifest, workspace_of
from ctxkit.providers import anthropic, gemini, openai_responses
from ctxkit.proxy.capture import Capture, Exchange
from ctxkit.version import __version__

__all__ = ["NOT_ITEMISED", "SOURCES", "Mapping", "Source", "Summary", "exchange_of", "import_transcripts", "load_state",
           "save_state"]

NOT_ITEMISED = ("imported from a transcript without the request: system prompt and tools not itemised")
_NAMESPACE = uuid.UUID("6f1d8f0e-3c52-4d7a-9a57-2f4d0c0b7e11")  # call ids of imported calls


@dataclass(frozen=True)
class Source:
    """One agent whose transcripts ctxkit reads: where they are, how to read them, the API its calls went to."""

    name: str
    api: str  # a recorded API of ctxkit.providers
    folder: Callable[[], str]  # the agent's default folder
    files: Callable[[str, str], list[str]]  # (folder, project dir) -> transcript paths, oldest first
    calls: Callable[[str, int, list[str] | None], Iterator[tuple[TranscriptCall, int]]]
    # (path, malformed, start) -> a reader that parses each line once as the file grows (ctxkit watch)
    reader: Callable[[str, list[str] | None, int], Reader]
    # path -> the file of the session it belongs to (a sub-agent's file: its session's; else itself)
    session_file: Callable[[str], str] = os.path.normpath


SOURCES: dict[str, Source] = {
    "claude-code": Source("claude-code", anthropic.MESSAGES, claude_code.transcripts_folder,
                          claude_code.transcript_files, claude_code.transcript_calls, claude_code.TranscriptReader,
                          claude_code.session_file),
    "codex": Source("codex", openai_responses.RESPONSES, codex.transcripts_folder, codex.transcript_files,
                    codex.transcript_calls, codex.RolloutReader),
    "gemini": Source("gemini", gemini.GENERATE, gemini_cli.transcripts_folder, gemini_cli.transcript_files,
                     gemini_cli.transcript_calls, gemini_cli.ChatReader),
}


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


def exchange_of(source: Source, call: TranscriptCall) -> Exchange:
    """The exchange the proxy would have seen for a call, its request parsed already (the reader's
    objects, which the requests of a session share and nobody changes)."""
    return Exchange(api=source.api, request_body=b"", headers=call.headers, request=call.request,
                    started=call.started, status=200, content_type="application/json",
                    chunks=[json.dumps(call.response).encode()], path=call.path)


def load_state(path: str) -> dict[str, int]:
    """How far each transcript was sent (byte offset by path), as a state file holds it."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) else {}


def save_state(path: str, state: dict[str, int]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
    os.replace(temporary, path)


class Mapping:
    """A source's calls as manifests, through one proxy :class:`Capture`: calls must come in file
    order, each once, so its runs and steps are placed as live (a resumed file maps its earlier
    calls again, unsent)."""

    def __init__(self, source: Source, *, include_text: bool = True) -> None:
        self.source = source
        self.capture = Capture(None, include_text=include_text)

    def file_read(self) -> None:
        """A file's calls are all mapped: what its requests shared is let go (the next file's share
        nothing with them; its runs and steps stay known)."""
        self.capture.parsed.forget()

    def manifest(self, call: TranscriptCall) -> Manifest | None:
        # The provider's id of the answer where the transcript keeps it (as the proxy stores it);
        # a compaction's own summary request, which the transcript does not keep, counts as a step.
        manifest = self.capture.build(exchange_of(self.source, call),
                                      call_id=uuid.uuid5(_NAMESPACE, f"{call.session}\0{call.key}").hex,
                                      unseen=int(call.compacted is not None))
        if manifest is None:
            return None
        if call.compacted is not None:
            manifest.compactions = _as_recorded(manifest, *call.compacted)
        manifest.builder = Builder(name="ctxkit.import", version=__version__)
        # What the transcript wrote of where the agent worked, else what its request told.
        manifest.workspace = workspace_of(call.cwd, call.git_branch) or manifest.workspace
        if not call.exact:
            manifest.warnings = [*manifest.warnings, NOT_ITEMISED][:100]
        return manifest


def _as_recorded(manifest: Manifest, trigger: str, tokens_before: int) -> list[Compaction]:
    """The manifest's compactions with the one a transcript records before it: its trigger and
    tokens before as the agent wrote them (the proxy, which sees only the calls, infers them);
    added when the proxy's rule found none (a summary it does not recognise)."""
    found = manifest.compactions[-1] if manifest.compactions else None
    if found is not None:
        found = msgspec.structs.replace(found, trigger=trigger or found.trigger,
                                        tokens_before=tokens_before or found.tokens_before)
        return [*manifest.compactions[:-1], found]
    summary = next((item.id for item in manifest.items if item.kind == "summary"), None)
    digest = hashlib.sha256(f"{manifest.run_id}\x1f{manifest.step}".encode()).hexdigest()[:16]
    return [Compaction(id=f"compaction-{digest}", strategy="client_summary", tokens_before=tokens_before,
                       tokens_after=manifest.usage.input_tokens, trigger=trigger, summary_item=summary)]


def _lines_before(path: str, offset: int) -> int:
    with open(path, "rb") as handle:
        return handle.read(offset).count(b"\n")


def _line_of(problem: str, path: str) -> int:
    """The line number of a reader's report ("<path>:<line>: <why>")."""
    number = problem[len(path) + 1:].split(":", 1)[0] if problem.startswith(f"{path}:") else ""
    return int(number) if number.isdigit() else 0


class _Progress:
    """A bar on stderr: share of the bytes read, files, calls, MB."""

    def __init__(self, total: int, files: int) -> None:
        self.total, self.files, self.shown = max(total, 1), files, 0.0

    def show(self, done: int, files: int, calls: int, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.shown < 0.2:
            return
        self.shown = now
        share = min(done / self.total, 1.0)
        bar = "#" * int(share * 24)
        print(f"\r[{bar:<24}] {share:4.0%} {files}/{self.files} files, {calls} calls, "
              f"{done / 1e6:.1f}/{self.total / 1e6:.1f} MB", end="", file=sys.stderr, flush=True)


def import_transcripts(source: Source, folder: str, sink: Any, *, state_path: str = "", since: float = 0.0,
                       project_dir: str = "", include_text: bool = True, progress: bool = False,
                       summary: Summary | None = None) -> Summary:
    """Send each new call of ``source``'s transcripts under ``folder`` to ``sink`` (``capture(manifest)``),
    counted in ``summary`` (a new one unless given). A file read before is read from its start:
    the calls before its offset map again (for their run placement) but are not sent."""
    summary = summary if summary is not None else Summary()
    state = load_state(state_path) if state_path else {}
    mapping = Mapping(source, include_text=include_text)
    files = source.files(folder, project_dir)
    read = []
    for path in files:
        summary.files += 1
        size, start = os.path.getsize(path), state.get(path, 0)
        if start >= size or os.path.getmtime(path) < since:
            summary.skipped += 1
            start = size  # nothing of it to send
        read.append((path, size, start))
    # A file with nothing to send is still mapped (unsent) when another file of its session has
    # calls to send: a sub-agent's file written after its session was imported becomes the child
    # run of the call that started it only once that call is mapped before it.
    sending = {source.session_file(path) for path, size, start in read if start < size}
    todo = [(path, size, start) for path, size, start in read if source.session_file(path) in sending]
    bar = _Progress(sum(size for _path, size, _start in todo), len(files)) if progress else None
    done = 0
    for number, (path, size, start) in enumerate(todo, start=len(files) - len(todo) + 1):
        problems: list[str] = []
        try:
            for call, end in source.calls(path, 0, problems):
                manifest = mapping.manifest(call)
                if manifest is None or end <= start or (call.started and call.started < since):
                    continue
                sink.capture(manifest)
                summary.calls += 1
                summary.sessions.add(call.session)
                state[path] = end
                if bar is not None:
                    bar.show(done + end, number, summary.calls)
        except Exception as exc:  # a file gone, or a shape no reader expected: the others go on
            summary.malformed.append(f"{path}: not read further ({type(exc).__name__}: {exc})")
        mapping.file_read()
        before = _lines_before(path, start) if start else 0
        summary.malformed.extend(p for p in problems if _line_of(p, path) > before)
        done += size
        if bar is not None:
            bar.show(done, number, summary.calls, force=True)
        if state_path:
            save_state(state_path, state)
    if bar is not None:
        print(file=sys.stderr)
    return summary
