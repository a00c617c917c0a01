"""From a forwarded exchange to a manifest, off the event loop.

The proxy's request handler does no parsing: it keeps the request body it forwarded, the
response bytes as they passed, the status and a few headers, and hands that :class:`Exchange`
to :class:`Capture` (a deque append). One daemon thread then decodes the bodies, reassembles a
stream from its events, masks secrets (ctxkit.proxy.secrets), places the call in a run
(ctxkit.proxy.runs), maps it with ``ctxkit.instrument``'s mapping
(:func:`ctxkit.instrumentation.bodies.manifest_from_bodies`) and hands the manifest to ctxkit's
non-blocking :class:`~ctxkit.record.client.Client` (bounded queue, retries, optional spool).
A call whose shorter history opens with a summary gets the compaction the agent did itself
(ctxkit.proxy.compactions). ``X-Ctxview-Evidence`` (a JSON object ``{"key": "literal"}``)
declares required evidence: each call of the request reports whether the literal was sent.
Nothing here can fail a proxied call: an exchange that cannot be read (malformed JSON, a body
that is not an object) is counted and skipped; a full buffer drops the exchange (counted).
"""

from __future__ import annotations

import collections
import json
import logging
import re
import threading
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxkit.instrumentation.bodies import ProviderError, manifest_from_bodies
from ctxkit.manifest import MAX_EVIDENCE, Builder, Manifest
from ctxkit.proxy.compactions import CompactionWatch
from ctxkit.proxy.runs import SUBAGENT_TOOLS, Delegation, RunResolver
from ctxkit.proxy.secrets import mask_json, mask_json_text
from ctxkit.proxy.sse import json_events
from ctxkit.version import __version__

logger = logging.getLogger("ctxkit.proxy")
__all__ = ["Exchange", "Capture", "Outcome", "Recorder", "STAT_KEYS", "answer_text", "declared_evidence",
           "delegations_of"]

STAT_KEYS = ("recorded", "unreadable", "dropped", "failed")
# The request headers a manifest may depend on (run, agent, session); never a credential.
IDENTITY_HEADERS = ("x-ctxview-run", "x-ctxview-agent", "x-ctxview-evidence", "x-claude-code-session-id",
                    "user-agent")
EVIDENCE_HEADER = "x-ctxview-evidence"


@dataclass(slots=True)
class Exchange:
    """One recorded-path exchange as the proxy forwarded it."""

    api: str  # a key of ctxkit.instrumentation.bodies.APIS
    request_body: bytes
    headers: dict[str, str]  # IDENTITY_HEADERS only, names in lower case
    started: float  # time.time() when the request went upstream
    status: int = 0  # the provider's HTTP status; 0: no answer
    content_type: str = ""
    content_encoding: str = ""
    chunks: list[bytes] = field(default_factory=list)
    duration: float = 0.0
    failure: str = ""  # why the exchange ended early, in words (client gone, upstream cut, unreachable)
    truncated: bool = False  # the response was longer than the proxy keeps a copy of


# A JSON escape of a UTF-16 surrogate: a lone one decodes to a str that UTF-8 cannot encode.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _encodable(value: Any) -> Any:
    """``value`` with lone surrogates in its strings replaced (U+FFFD), so the manifest encodes."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    return value


class Recorder(Protocol):
    """What the proxy hands finished exchanges to: :class:`Capture` (a thread) or
    ctxkit.proxy.worker's ``CaptureProcess`` (a child process)."""

    def submit(self, exchange: Exchange) -> None: ...


def _decoded(exchange: Exchange) -> tuple[str, str]:
    """The response body as text, and a warning when it could not be fully decoded."""
    raw = b"".join(exchange.chunks)
    encoding = exchange.content_encoding.strip().lower()
    warning = ""
    if encoding in ("gzip", "x-gzip", "deflate"):
        try:  # wbits 47: gzip or zlib header, detected; a stream cut short decodes as far as it goes
            raw = zlib.decompressobj(47).decompress(raw)
        except zlib.error:
            return "", f"the response's {encoding} body could not be decoded"
    elif encoding and encoding != "identity":
        return "", f"the response's content encoding {encoding} is not decoded by the proxy"
    return raw.decode("utf-8", "replace"), warning


def _error_type(payload: Any) -> str:
    """The provider's error type: Anthropic ``{"error": {"type": ...}}``, OpenAI ``{"error":
    {"type"/"code": ...}}``, or a stream's error event."""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    if isinstance(error, dict):
        return str(error.get("type") or error.get("code") or "")[:100]
    if payload.get("type") == "error":
        return "error"
    return ""


def _stream_error(events: list[dict[str, Any]]) -> str:
    """The error a stream reported in band: Anthropic's ``error`` event, an OpenAI chunk with an
    ``error``, Responses' ``error`` / ``response.failed``."""
    for event in events:
        kind = event.get("type")
        if kind == "error" or (kind is None and "error" in event):
            return _error_type(event) or "error"
        if kind == "response.failed":
            error = (event.get("response") or {}).get("error") or {}
            return str(error.get("code") or "response.failed") if isinstance(error, dict) else "response.failed"
    return ""


def declared_evidence(headers: dict[str, str]) -> tuple[dict[str, str], str]:
    """The ``X-Ctxview-Evidence`` header's ``{key: literal}``, and a warning when it is not one."""
    raw = headers.get(EVIDENCE_HEADER, "").strip()
    if not raw:
        return {}, ""
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                              for k, v in value.items()):
        return {}, "X-Ctxview-Evidence is not a JSON object of non-empty strings: ignored"
    return dict(list(value.items())[:MAX_EVIDENCE]), ""


@dataclass
class Outcome:
    """What the response said, ready for the mapping."""

    response: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None
    error: ProviderError | None = None
    warnings: list[str] = field(default_factory=list)


def read_response(exchange: Exchange, streamed: bool) -> Outcome:
    out = Outcome()
    text, warning = _decoded(exchange)
    if warning:
        out.warnings.append(warning)
    if exchange.truncated:
        out.warnings.append("the response was longer than the proxy keeps; usage may be missing")
    is_sse = "text/event-stream" in exchange.content_type.lower() or (streamed and exchange.status == 200
                                                                       and not text.lstrip().startswith("{"))
    payload: Any = None
    if is_sse:
        out.events, unreadable = json_events(text)
        if unreadable:
            out.warnings.append(f"{unreadable} streamed events were not JSON objects")
    elif text:
        try:
            payload = json.loads(text)
        except ValueError:
            if exchange.status and exchange.status < 400 and not exchange.failure:
                out.warnings.append("the response body is not JSON")
    if exchange.status >= 400 or exchange.status == 0:
        kind = _error_type(payload)
        out.error = ProviderError(exchange.status, kind)
        out.events = None
        if kind:
            out.warnings.append(f"provider error: {kind}")
    elif out.events is not None:
        kind = _stream_error(out.events)
        if kind:
            out.error = ProviderError(exchange.status, kind)
            out.warnings.append(f"provider error in the stream: {kind}")
    elif isinstance(payload, dict):
        out.response = payload
    if exchange.failure:
        out.warnings.append(exchange.failure)
        if out.error is None:
            out.error = ProviderError(exchange.status, "")
    return out


def _block_text(block: Any) -> str:
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "compaction":
        content = block.get("content")
        return content if isinstance(content, str) else ""
    text = block.get("text")
    return text if isinstance(text, str) else ""


def answer_text(outcome: Outcome) -> str:
    """The text the model answered (Anthropic text and compaction blocks, Chat Completions'
    message, Responses' output text), from the response or the streamed events."""
    parts: list[str] = []
    response = outcome.response or {}
    for block in response.get("content") or [] if isinstance(response.get("content"), list) else []:
        parts.append(_block_text(block))
    for choice in response.get("choices") or [] if isinstance(response.get("choices"), list) else []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            parts.append(message["content"])
    for entry in response.get("output") or [] if isinstance(response.get("output"), list) else []:
        for block in entry.get("content") or [] if isinstance(entry, dict) and isinstance(entry.get("content"),
                                                                                            list) else []:
            parts.append(_block_text(block))
    for event in outcome.events or ():
        kind = event.get("type")
        delta = event.get("delta")
        if kind == "content_block_delta" and isinstance(delta, dict) and delta.get("type") == "text_delta":
            parts.append(str(delta.get("text") or ""))
        elif kind == "content_block_start":
            parts.append(_block_text(event.get("content_block")))
        elif kind == "response.output_text.delta" and isinstance(delta, str):
            parts.append(delta)
        elif kind is None and isinstance(event.get("choices"), list):
            for choice in event["choices"]:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    parts.append(delta["content"])
    return "".join(parts)


def _delegation(block: dict[str, Any], arguments: Any) -> Delegation | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict) or not isinstance(arguments.get("prompt"), str):
        return None
    kind = arguments.get("subagent_type")
    return Delegation(tool_use_id=str(block.get("id") or ""), prompt=arguments["prompt"],
                      subagent_type=kind if isinstance(kind, str) else "")


def delegations_of(outcome: Outcome) -> tuple[Delegation, ...]:
    """The sub-agents an Anthropic answer asked for: its ``tool_use`` blocks of Claude Code's
    sub-agent tool (ctxkit.proxy.runs.SUBAGENT_TOOLS), from the response or the streamed events
    (a streamed tool's input arrives as ``input_json_delta`` pieces)."""
    out: list[Delegation] = []
    content = (outcome.response or {}).get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") in SUBAGENT_TOOLS:
            found = _delegation(block, block.get("input"))
            if found is not None:
                out.append(found)
    started: dict[Any, dict[str, Any]] = {}
    pieces: dict[Any, list[str]] = {}
    for event in outcome.events or ():
        kind, index = event.get("type"), event.get("index")
        block, delta = event.get("content_block"), event.get("delta")
        if kind == "content_block_start" and isinstance(block, dict) and block.get("type") == "tool_use" \
                and block.get("name") in SUBAGENT_TOOLS:
            started[index], pieces[index] = block, []
        elif kind == "content_block_delta" and index in started and isinstance(delta, dict) \
                and isinstance(delta.get("partial_json"), str):
            pieces[index].append(delta["partial_json"])
        elif kind == "content_block_stop" and index in started:
            block = started.pop(index)
            found = _delegation(block, "".join(pieces.pop(index)) or block.get("input"))
            if found is not None:
                out.append(found)
    return tuple(out)


def _response_id(api: str, outcome: Outcome) -> str:
    if not api.startswith("openai.responses"):
        return ""
    if outcome.response is not None:
        return str(outcome.response.get("id") or "")
    for event in outcome.events or ():
        response = event.get("response")
        if isinstance(response, dict) and response.get("id"):
            return str(response["id"])
    return ""


class Capture:
    """The proxy's recorder: a bounded buffer of exchanges and the thread that maps them.

    ``sink``: anything with ``capture(manifest)`` (a :class:`ctxkit.Client`); it may be replaced
    while the proxy runs. ``include_text=False`` records token counts and hashes, never text.
    """

    POLL = 0.05

    def __init__(self, sink: Any, *, include_text: bool = True, agent: str = "", max_queue: int = 10_000,
                 resolver: RunResolver | None = None) -> None:
        self.sink = sink
        self.include_text = include_text
        self.agent = agent
        self.max_queue = max_queue
        self.resolver = resolver or RunResolver()
        self.compactions = CompactionWatch()
        self.stats = dict.fromkeys(STAT_KEYS, 0)
        self._buffer: collections.deque[Exchange] = collections.deque()
        self._wake = threading.Event()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, exchange: Exchange) -> None:
        """Queue one finished exchange; never blocks, never raises."""
        try:
            if len(self._buffer) >= self.max_queue:
                self.stats["dropped"] += 1
                return
            self._buffer.append(exchange)
            thread = self._thread
            if thread is None or not thread.is_alive():
                self._start()
        except Exception:
            self.stats["dropped"] += 1

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="ctxkit-proxy-capture", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            try:
                self._busy = True
                exchange = self._buffer.popleft()
            except IndexError:
                self._busy = False
                self._wake.wait(self.POLL)
                self._wake.clear()
                continue
            self.handle(exchange)

    def handle(self, exchange: Exchange) -> None:
        """Map one exchange and hand its manifest to the sink, on the calling thread."""
        try:
            manifest = self.build(exchange)
        except Exception:
            self.stats["failed"] += 1
            logger.debug("ctxkit proxy: could not build a manifest", exc_info=True)
            return
        if manifest is None:
            self.stats["unreadable"] += 1
            return
        try:
            self.sink.capture(manifest)
            self.stats["recorded"] += 1
        except Exception:
            self.stats["failed"] += 1

    def build(self, exchange: Exchange) -> Manifest | None:
        """The manifest of one exchange, or None when its request body is not a JSON object
        (the provider answers such a request with a 400 of its own; there is no call to show)."""
        try:
            text = exchange.request_body.decode("utf-8")
            request = json.loads(text) if text else {}
        except ValueError:  # not UTF-8, not JSON
            return None
        if not isinstance(request, dict):
            return None
        if _SURROGATE_ESCAPE.search(exchange.request_body):
            request = _encodable(request)
        masked, count = mask_json_text(text)
        sent = request
        if count:
            try:
                sent = _encodable(json.loads(masked)) if _SURROGATE_ESCAPE.search(exchange.request_body) \
                    else json.loads(masked)
            except ValueError:
                sent = mask_json(request)
            if not isinstance(sent, dict):
                sent = mask_json(request)
        outcome = read_response(exchange, bool(request.get("stream")) or exchange.api.endswith("resumed"))
        call_id = uuid.uuid4().hex
        placement = self.resolver.place(exchange.api, request, exchange.headers, default_agent=self.agent,
                                        response_id=_response_id(exchange.api, outcome),
                                        failed=outcome.error is not None, answer=answer_text(outcome),
                                        call_id=call_id, delegations=delegations_of(outcome))
        evidence, evidence_warning = declared_evidence(exchange.headers)
        if evidence_warning:
            outcome.warnings.append(evidence_warning)
        manifest = manifest_from_bodies(
            exchange.api, sent, response=outcome.response, events=outcome.events,
            error=outcome.error, call_id=call_id, run_id=placement.run_id, step=placement.step, agent=placement.agent,
            started=exchange.started, duration=exchange.duration, include_text=self.include_text,
            evidence=evidence or None,
        )
        manifest.builder = Builder(name="ctxkit.proxy", version=__version__)
        if placement.parent_run_id:
            manifest.parent_run_id = placement.parent_run_id
            manifest.parent_call_id = placement.parent_call_id or None
        compaction = self.compactions.observe(exchange.api, sent, manifest)
        if compaction is not None:
            manifest.compactions = [*manifest.compactions, compaction]
        if outcome.warnings:
            manifest.warnings = [*manifest.warnings, *outcome.warnings][:100]
        return manifest

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted exchange is mapped and handed to the sink, then flush the sink."""
        deadline = time.monotonic() + timeout
        while self._buffer or self._busy:
            if self._thread is None or not self._thread.is_alive():
                break
            if time.monotonic() > deadline:
                return False
            self._wake.set()
            time.sleep(0.005)
        flush = getattr(self.sink, "flush", None)
        return bool(flush(timeout=max(0.0, deadline - time.monotonic()))) if callable(flush) else True
