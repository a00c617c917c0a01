"""From a forwarded exchange to a manifest, off the event loop.

The proxy's request handler does no parsing: it keeps the request body it forwarded, the
response bytes as they passed, the status and a few headers, and hands that :class:`Exchange`
to :class:`Capture` (a deque append). The one background worker (ctxkit.record.background) then
decodes the bodies, reassembles a
stream from its events, masks secrets (ctxkit.proxy.secrets), places the call in a run
(ctxkit.proxy.runs), maps it with its provider's mapping (ctxkit.providers, through
:func:`ctxkit.instrumentation.bodies.manifest_from_bodies`) and hands the manifest to ctxkit's
non-blocking :class:`~ctxkit.record.client.Client` (bounded queue, retries, optional spool).
A call whose shorter history opens with a summary gets the compaction the agent did itself
(ctxkit.proxy.compactions). ``X-Ctxview-Evidence`` (a JSON object ``{"key": "literal"}``)
declares required evidence: each call of the request reports whether the literal was sent.
``ctxkit import`` hands over requests it parsed already (``Exchange.request``), whose repeated
messages are masked and read once (:class:`ParsedRequests`), with the same result.
Nothing here can fail a proxied call: an exchange that cannot be read (malformed JSON, a body
that is not an object) is counted and skipped; a full buffer drops the exchange (counted).
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from ctxkit import agents
from ctxkit.instrumentation.bodies import ProviderError, manifest_from_bodies
from ctxkit.manifest import MAX_EVIDENCE, Builder, Manifest, workspace_of
from ctxkit.providers import Provider, for_api
from ctxkit.proxy.compactions import CompactionWatch
from ctxkit.proxy.history import Entries, History
from ctxkit.proxy.lru import ObjectMemo
from ctxkit.proxy.runs import Delegation, RunResolver
from ctxkit.proxy.secrets import mask_json, mask_json_text
from ctxkit.record.background import Background
from ctxkit.version import __version__

logger = logging.getLogger("ctxkit.proxy")
__all__ = ["Exchange", "Capture", "Outcome", "Recorder", "STAT_KEYS", "answer_text", "declared_evidence",
           "delegations_of"]

STAT_KEYS = ("recorded", "unreadable", "dropped", "failed")
# The request headers a manifest may depend on (run, agent, session); never a credential.
IDENTITY_HEADERS = ("x-ctxview-run", "x-ctxview-agent", "x-ctxview-evidence", "user-agent",
                    *agents.IDENTITY_HEADERS)
EVIDENCE_HEADER = "x-ctxview-evidence"


@dataclass(slots=True)
class Exchange:
    """One recorded-path exchange as the proxy forwarded it."""

    api: str  # a recorded API of ctxkit.providers
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
    path: str = ""  # the request's path, without its query (which may hold a key)
    # The request body already parsed (``ctxkit import``), read instead of ``request_body``: its
    # objects are not changed in place, so what a later request repeats is masked and read once.
    request: dict[str, Any] | None = None


# A JSON escape of a UTF-16 surrogate: a lone one decodes to a str that UTF-8 cannot encode.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
# In ``json.dumps`` output (ASCII, lower-case escapes), a surrogate escape that is not half of a
# pair: a character outside the BMP is written as a pair, a lone surrogate alone.
# (A parsed value never holds a pair: ``json.loads`` joins one into its character.)
_LONE_SURROGATE_ESCAPE = re.compile(r"\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])"
                                    r"|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}")


def _encodable(value: Any) -> Any:
    """``value`` with lone surrogates in its strings replaced (U+FFFD), so the manifest encodes."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encodable(v) for v in value]
    return value


# A value of a parsed request as it reads (lone surrogates replaced) and as it is recorded (secrets
# masked), and how many secrets were masked.
_Masked = tuple[Any, Any, int]


def _masked(value: Any, text: str, odd: bool) -> _Masked:
    """``value`` and ``text``, its JSON, masked as :func:`mask_json_text` masks a whole body
    (``odd``: the text may escape a lone surrogate, which ``value`` then holds)."""
    readable = _encodable(value) if odd else value
    masked, count = mask_json_text(text)
    if not count:
        return readable, readable, 0
    try:
        sent = json.loads(masked)
    except ValueError:
        sent = mask_json(readable)
    return readable, _encodable(sent) if odd else sent, count


def _masked_parsed(value: Any) -> _Masked:
    """:func:`_masked` of a parsed value, its JSON written here (lower-case escapes, pairs joined)."""
    text = json.dumps(value)
    return _masked(value, text, _LONE_SURROGATE_ESCAPE.search(text) is not None)


class ParsedRequests:
    """The requests of an import, parsed already, masked one top-level field and one entry of a
    list (a message, a tool, a system block) at a time, as :func:`mask_json_text` masks the whole
    body (a pattern ends at a string's end, so none spans two of them): an entry a later request
    repeats (the same object) is masked once. Also what the history's entries read as."""

    def __init__(self, limit: int = 20_000) -> None:
        self.limit = limit
        self.forget()

    def forget(self) -> None:
        """Let go of what was read (the requests that come next share nothing with those before)."""
        self.entries: ObjectMemo[_Masked] = ObjectMemo(self.limit)
        self.history: Entries = ObjectMemo(self.limit)
        self.mapping: ObjectMemo[Any] = ObjectMemo(self.limit)  # what the provider's mapping reads of them

    def _entry(self, entry: Any) -> _Masked:
        return self.entries.get(entry, _masked_parsed)

    def masked(self, request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the request as it reads, as recorded); the same object twice when nothing was masked."""
        readable: dict[str, Any] = {}
        sent: dict[str, Any] = {}
        total = 0
        for key, value in request.items():
            if not isinstance(value, list):
                continue
            done = [self._entry(entry) for entry in value]
            count = sum(c for _r, _s, c in done)
            if any(r is not e for (r, _s, _c), e in zip(done, value, strict=True)):
                value = [r for r, _s, _c in done]
            readable[key], sent[key] = value, [s for _r, s, _c in done] if count else value
            total += count
        rest = {key: value for key, value in request.items() if key not in readable}  # one text: small fields
        read, out, count = _masked_parsed(rest)
        if count and not isinstance(out, dict):
            out = mask_json(read)
        total += count
        readable = {key: readable[key] if key in readable else read[key] for key in request}
        if not total:
            return readable, readable
        sent = {key: sent[key] if key in sent else out.get(key) for key in request}
        return readable, sent


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
    """What the response of a call of ``api`` said, ready for the mapping."""

    api: str
    response: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None
    error: ProviderError | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def provider(self) -> Provider:
        return for_api(self.api)


def read_response(exchange: Exchange, streamed: bool) -> Outcome:
    provider = for_api(exchange.api)
    out = Outcome(api=exchange.api)
    text, warning = _decoded(exchange)
    if warning:
        out.warnings.append(warning)
    if exchange.truncated:
        out.warnings.append("the response was longer than the proxy keeps; usage may be missing")
    is_stream = "text/event-stream" in exchange.content_type.lower() or (streamed and exchange.status == 200
                                                                          and not text.lstrip().startswith("{"))
    payload: Any = None
    if is_stream:
        out.events, unreadable = provider.read_events(text)
        if unreadable:
            out.warnings.append(f"{unreadable} streamed events were not JSON objects")
    elif text:
        try:
            payload = json.loads(text)
        except ValueError:
            if exchange.status and exchange.status < 400 and not exchange.failure:
                out.warnings.append("the response body is not JSON")
    if exchange.status >= 400 or exchange.status == 0:
        kind = provider.error_type(payload)
        out.error = ProviderError(exchange.status, kind)
        out.events = None
        if kind:
            out.warnings.append(f"provider error: {kind}")
    elif out.events is not None:
        kind = provider.stream_error(out.events)
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


def answer_text(outcome: Outcome) -> str:
    """The text the model answered, from the response or the streamed events."""
    return outcome.provider.answer_text(outcome.response, outcome.events)


def delegations_of(outcome: Outcome) -> tuple[Delegation, ...]:
    """The sub-agents an answer asked for (ctxkit.agents: the tool calls of an agent's sub-agent
    tool), from the response or the streamed events."""
    found = (agents.delegation(call.id, call.name, call.arguments)
             for call in outcome.provider.tool_calls(outcome.response, outcome.events, agents.SUBAGENT_TOOLS))
    return tuple(d for d in found if d is not None)


def _read_request(body: bytes) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The request body as it reads (lone surrogates replaced) and as recorded (secrets masked);
    the same object twice when nothing was masked; None when it is not a JSON object."""
    try:
        text = body.decode("utf-8")
        request = json.loads(text) if text else {}
    except ValueError:  # not UTF-8, not JSON
        return None
    if not isinstance(request, dict):
        return None
    readable, sent, count = _masked(request, text, _SURROGATE_ESCAPE.search(body) is not None)
    if count and not isinstance(sent, dict):
        sent = mask_json(readable)
    return readable, sent


class Capture:
    """The proxy's recorder: exchanges go to the one background worker (ctxkit.record.background),
    which maps them.

    ``sink``: anything with ``capture(manifest)`` (a :class:`ctxkit.Client`); it may be replaced
    while the proxy runs. ``include_text=False`` records token counts and hashes, never text.
    """

    def __init__(self, sink: Any, *, include_text: bool = True, agent: str = "", max_queue: int = 10_000,
                 resolver: RunResolver | None = None) -> None:
        self.sink = sink
        self.include_text = include_text
        self.agent = agent
        self.resolver = resolver or RunResolver()
        self.compactions = CompactionWatch()
        self.parsed = ParsedRequests()
        self.stats = dict.fromkeys(STAT_KEYS, 0)
        self.background: Background[Exchange] = Background(self.handle, name="ctxkit-proxy-capture",
                                                           max_queue=max_queue, stats=self.stats)

    def submit(self, exchange: Exchange) -> None:
        """Queue one finished exchange; never blocks, never raises."""
        self.background.submit(exchange)

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

    def build(self, exchange: Exchange, call_id: str = "", unseen: int = 0) -> Manifest | None:
        """The manifest of one exchange, or None when its request body is not a JSON object
        (the provider answers such a request with a 400 of its own; there is no call to show).
        Its call id is the provider's id of the response (``msg_…``, ``resp_…``, ``chatcmpl-…``,
        Gemini's ``responseId``), so a call recorded twice (captured live, then imported) is
        stored once; ``call_id`` (a uuid4 unless given) when the answer has none. ``unseen``: calls
        of its run just before it that the caller never saw (ctxkit.proxy.runs counts them in its step)."""
        known: Entries | None = None
        shared: ObjectMemo[Any] | None = None
        if exchange.request is not None:
            request, sent = self.parsed.masked(exchange.request)
            known, shared = self.parsed.history, self.parsed.mapping
        else:
            read = _read_request(exchange.request_body)
            if read is None:
                return None
            request, sent = read
        provider = for_api(exchange.api)
        unmasked = sent is request
        request = provider.with_path(request, exchange.path)  # Gemini: the model is in the path
        sent = request if unmasked else provider.with_path(sent, exchange.path)
        outcome = read_response(exchange, provider.streamed(exchange.api, request, exchange.path))
        history = History(exchange.api, request, known)
        response_id = provider.response_id(exchange.api, outcome.response, outcome.events)
        call_id = response_id or call_id or uuid.uuid4().hex
        placement = self.resolver.place(exchange.api, request, exchange.headers, default_agent=self.agent,
                                        response_id=response_id,
                                        failed=outcome.error is not None, answer=answer_text(outcome),
                                        call_id=call_id, delegations=delegations_of(outcome), history=history,
                                        unseen=unseen)
        evidence, evidence_warning = declared_evidence(exchange.headers)
        if evidence_warning:
            outcome.warnings.append(evidence_warning)
        manifest = manifest_from_bodies(
            exchange.api, sent, response=outcome.response, events=outcome.events,
            error=outcome.error, call_id=call_id, run_id=placement.run_id, step=placement.step, agent=placement.agent,
            started=exchange.started, duration=exchange.duration, include_text=self.include_text,
            evidence=evidence or None, shared=shared,
        )
        manifest.builder = Builder(name="ctxkit.proxy", version=__version__)
        manifest.workspace = workspace_of(*agents.workspace(sent))  # where the agent says it works
        if placement.parent_run_id:
            manifest.parent_run_id = placement.parent_run_id
            manifest.parent_call_id = placement.parent_call_id or None
        compaction = self.compactions.observe(exchange.api, sent, manifest,
                                              history=history if unmasked else None)
        if compaction is not None:
            manifest.compactions = [*manifest.compactions, compaction]
        if outcome.warnings:
            manifest.warnings = [*manifest.warnings, *outcome.warnings][:100]
        return manifest

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every submitted exchange is mapped and handed to the sink, then flush the sink."""
        deadline = time.monotonic() + timeout
        if not self.background.drain(deadline):
            return False
        flush = getattr(self.sink, "flush", None)
        return bool(flush(timeout=max(0.0, deadline - time.monotonic()))) if callable(flush) else True
