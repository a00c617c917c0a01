"""The proxy's HTTP side (aiohttp): forward every request to the provider, keep a copy of the
model calls for ctxkit.proxy.capture.

One port serves every API. Which upstream a request goes to, and whether it is a recorded model
call, its provider says (ctxkit.providers: routing by path and headers; OpenAI's upstream takes
what no other provider claims). The path and query are forwarded exactly as received.

Forwarding is transparent: the method, path, query, body and end-to-end headers go upstream
unchanged (hop-by-hop headers, ``Host`` and the proxy's own ``X-Ctxview-*`` headers are
dropped; nothing is added: no ``Accept-Encoding``, ``User-Agent`` or ``Via`` of the proxy's
own; on recorded calls ``Accept-Encoding`` keeps only gzip, deflate and identity, the encodings
the proxy can read back for the manifest); the provider's status, reason, end-to-end headers
and body come back unchanged, the body chunk by chunk as it arrives (compressed bodies stay
compressed), with no header the provider did not send (aiohttp's own ``Date``, ``Server`` and
default ``Content-Type`` are taken out again; only the framing, ``Content-Length`` or
``Transfer-Encoding`` and ``Connection``, is the proxy's). Bodies stream both ways on every
request. Recorded calls (the providers' model calls: ``POST /v1/messages``,
``/v1/chat/completions``, ``/v1/responses``, ...) keep a copy of the request body as it goes
upstream (up to ``max_record_bytes``; a larger one is forwarded unrecorded) and of the response
as it comes back; the copies are handed to the recorder once the agent has the whole answer, so
forwarding never waits for recording.

Failures, as the agent sees them:
- the upstream cannot be reached (refused, DNS, TLS, connect timeout): ``502`` with a JSON body
  in the provider's error shape (its module's ``error_body``) naming the upstream and the cause
  (the SDKs retry a 502 as they retry a connection error);
- the upstream cuts a response short: the proxy closes the agent's connection at the same point,
  without ending the body, so the agent sees a truncated response as it would directly;
- the agent disconnects: the upstream request is closed at once (cancelling generation).
The proxy itself never answers a request with an error of its own otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from ctxkit import providers
from ctxkit.proxy.capture import IDENTITY_HEADERS, Capture, Exchange, Recorder
from ctxkit.proxy.config import ProxyConfig

logger = logging.getLogger("ctxkit.proxy")
__all__ = ["Proxy", "RunningProxy", "route", "start_in_thread"]

HOP_BY_HOP = frozenset(("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade", "expect"))
DROPPED_REQUEST_HEADERS = HOP_BY_HOP | {"host", "x-ctxview-run", "x-ctxview-agent", "x-ctxview-evidence"}
# Headers aiohttp's client adds when the request has none; the agent's request is sent without them.
AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")
MAX_KEPT_RESPONSE = 64 * 1024 * 1024  # a copy longer than this is not kept whole for the manifest


def route(method: str, path: str, query: str, headers: Any) -> tuple[str, str]:
    """(the upstream, e.g. "anthropic" or "openai"; the recorded API or "") of one request."""
    provider, api = providers.route(method, path, query, headers)
    return provider.UPSTREAM, api


# A key in a URL's query (Gemini's ?key=) as an error text may quote it: never logged or answered.
_URL_KEY = re.compile(r"([?&](?:key|api_key|access_token)=)[^&#\s'\"]*", re.IGNORECASE)


def without_keys(text: str) -> str:
    return _URL_KEY.sub(r"\1[masked]", text)


def _connection_tokens(headers: Any) -> set[str]:
    """Header names listed in ``Connection`` are hop-by-hop too."""
    return {t.strip().lower() for v in headers.getall("Connection", ()) for t in v.split(",") if t.strip()}


DECODABLE = frozenset(("gzip", "x-gzip", "deflate", "identity"))


def _decodable_encodings(values: list[str]) -> str:
    """An ``Accept-Encoding`` narrowed to what the proxy can decode for the manifest (Claude Code
    also offers br and zstd); the agent still gets an encoding it asked for."""
    kept = [part.strip() for value in values for part in value.split(",")
            if part.split(";")[0].strip().lower() in DECODABLE]
    return ", ".join(p for p in kept if p)


# What aiohttp puts in a response that has none: taken out again unless the response set it.
ADDED_BY_AIOHTTP = ("Date", "Server", "Content-Type")


class _Relayed(web.StreamResponse):
    """A response whose headers are the ones it was made with, plus framing (``Content-Length``
    or ``Transfer-Encoding``, ``Connection``): see :func:`_without_added_headers`."""

    def __init__(self, status: int, reason: str | None, headers: list[tuple[str, str]]) -> None:
        super().__init__(status=status, reason=reason)
        for name, value in headers:
            self.headers.add(name, value)
        self.chosen = frozenset(name.lower() for name, _ in headers)


async def _without_added_headers(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp's ``on_response_prepare``: runs after aiohttp filled in its defaults, just before
    the headers are written."""
    chosen = getattr(response, "chosen", None)
    if chosen is not None:
        for name in ADDED_BY_AIOHTTP:
            if name.lower() not in chosen:
                response.headers.popall(name, None)


class _OwnAnswer(web.Response):
    """The proxy's own answer: a JSON body, its type and length, nothing else."""

    chosen = frozenset(("content-type",))

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status=status, body=body, content_type="application/json")


class _Tee:
    """The agent's request body on its way upstream, with a copy kept for the recorder: each
    chunk is forwarded as it arrives; the copy stops (``over``) past ``limit`` bytes."""

    def __init__(self, request: web.Request, limit: int) -> None:
        self.request = request
        self.limit = limit
        self.kept: list[bytes] = []
        self.size = 0
        self.over = False
        self.complete = not request.body_exists

    def _keep(self, chunk: bytes) -> None:
        if self.over:
            return
        self.size += len(chunk)
        if self.size > self.limit:
            self.over, self.kept = True, []
        else:
            self.kept.append(chunk)

    async def chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.request.content.readany():
            self._keep(chunk)
            yield chunk
        self.complete = True

    @property
    def whole(self) -> bool:
        """The copy holds the entire body."""
        return not self.over and (self.complete or self.request.content.is_eof())

    async def drain(self) -> None:
        """Read (and keep) what the upstream did not take, when it could not be reached."""
        while not self.complete and not self.over:
            chunk = await self.request.content.readany()
            if not chunk:
                self.complete = True
            else:
                self._keep(chunk)


class Proxy:
    """The request handler and its upstream session; ``capture`` is None when nothing is recorded."""

    def __init__(self, config: ProxyConfig, capture: Recorder | None) -> None:
        self.config = config
        self.capture = capture
        self.upstreams = {name: URL(config.upstream(name).rstrip("/")) for name in providers.UPSTREAMS}
        self.session: aiohttp.ClientSession | None = None

    async def start_session(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.connect_timeout,
                                        sock_read=self.config.read_timeout)
        self.session = aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False,
                                             cookie_jar=aiohttp.DummyCookieJar(), skip_auto_headers=(),
                                             trust_env=False)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=0)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_response_prepare.append(_without_added_headers)
        app.on_startup.append(lambda _: self.start_session())
        app.on_cleanup.append(lambda _: self.close())
        return app

    def _target(self, upstream: str, request: web.Request) -> URL:
        base = self.upstreams[upstream]
        raw = request.raw_path  # path and query exactly as the agent sent them
        return URL(str(base) + raw, encoded=True) if base.raw_path in ("", "/") else \
            URL(str(base).rstrip("/") + raw, encoded=True)

    def _forward_headers(self, request: web.Request, recording: bool) -> CIMultiDict[str]:
        drop = DROPPED_REQUEST_HEADERS | _connection_tokens(request.headers)
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in drop)
        if recording and "Accept-Encoding" in headers:
            narrowed = _decodable_encodings(headers.getall("Accept-Encoding"))
            del headers["Accept-Encoding"]
            if narrowed:
                headers["Accept-Encoding"] = narrowed
        return headers

    async def _stream_body(self, request: web.Request) -> AsyncIterator[bytes]:
        while chunk := await request.content.readany():
            yield chunk

    async def handle(self, request: web.Request) -> web.StreamResponse:
        upstream, api = route(request.method, request.path, request.query_string, request.headers)
        recording = bool(api) and self.capture is not None
        headers = self._forward_headers(request, recording)
        data: Any = None
        tee: _Tee | None = None
        exchange: Exchange | None = None
        if recording:
            lowered = {k.lower(): v for k, v in request.headers.items()}
            exchange = Exchange(api=api, request_body=b"", started=time.time(),
                                headers={k: lowered[k] for k in IDENTITY_HEADERS if k in lowered},
                                path=request.path)
            tee = _Tee(request, self.config.max_record_bytes)
            data = tee.chunks() if request.body_exists else None
        elif request.body_exists:
            data = self._stream_body(request)
        skip = [h for h in AUTO_HEADERS if h not in headers]
        t0 = time.perf_counter()
        try:
            return await self._exchange(request, upstream, headers, data, skip, exchange, tee, t0)
        except asyncio.CancelledError:  # the agent disconnected (aiohttp cancels the handler)
            if exchange is not None and not exchange.failure:
                exchange.failure = "the client disconnected before the response ended"
            raise
        finally:
            if exchange is not None and tee is not None and tee.whole and self.capture is not None:
                exchange.duration = time.perf_counter() - t0
                exchange.request_body = b"".join(tee.kept)  # one chunk: that chunk, not a copy
                self.capture.submit(exchange)

    async def _exchange(self, request: web.Request, upstream: str, headers: CIMultiDict[str], data: Any,
                        skip: list[str], exchange: Exchange | None, tee: _Tee | None,
                        t0: float) -> web.StreamResponse:
        assert self.session is not None
        target = self._target(upstream, request)
        try:
            up = await self.session.request(request.method, target, headers=headers, data=data,
                                            skip_auto_headers=skip, allow_redirects=False, compress=None)
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError) as exc:
            message = without_keys(f"ctxkit proxy: the upstream {self.upstreams[upstream]} did not answer "
                                    f"({type(exc).__name__}: {exc})")[:500]
            logger.warning("%s %s: %s", request.method, request.path, message)
            if exchange is not None and tee is not None:
                exchange.failure = message
                await tee.drain()  # the call is recorded with the request the agent sent
            return _OwnAnswer(502, providers.error_body(upstream, message))
        try:
            return await self._relay(request, up, exchange)
        finally:
            up.close()  # no-op after a complete body; otherwise closes the connection (cancels the upstream)

    async def _relay(self, request: web.Request, up: aiohttp.ClientResponse,
                     exchange: Exchange | None) -> web.StreamResponse:
        drop = HOP_BY_HOP | _connection_tokens(up.headers)
        response = _Relayed(up.status, up.reason, [(k, v) for k, v in up.headers.items() if k.lower() not in drop])
        if exchange is not None:
            exchange.status = up.status
            exchange.content_type = up.headers.get("Content-Type", "")
            exchange.content_encoding = up.headers.get("Content-Encoding", "")
        kept = 0
        try:
            await response.prepare(request)
        except (ConnectionError, RuntimeError) as exc:
            return self._client_gone(exchange, response, exc)
        while True:
            try:
                chunk = await up.content.readany()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                # Cut short upstream: end the agent's connection here too, without a clean end of body.
                if exchange is not None:
                    exchange.failure = f"the upstream ended the response early ({type(exc).__name__})"
                if request.transport is not None:
                    request.transport.close()
                return response
            if not chunk:
                break
            if exchange is not None and not exchange.truncated:
                kept += len(chunk)
                if kept <= MAX_KEPT_RESPONSE:
                    exchange.chunks.append(chunk)
                else:
                    exchange.truncated = True
            try:
                await response.write(chunk)
            except (ConnectionError, RuntimeError) as exc:
                return self._client_gone(exchange, response, exc)
        try:
            await response.write_eof()
        except (ConnectionError, RuntimeError) as exc:
            return self._client_gone(exchange, response, exc)
        return response

    def _client_gone(self, exchange: Exchange | None, response: web.StreamResponse,
                     exc: BaseException) -> web.StreamResponse:
        if exchange is not None:
            exchange.failure = "the client disconnected before the response ended"
        logger.debug("ctxkit proxy: client gone: %s", type(exc).__name__)
        return response


async def serve(config: ProxyConfig, capture: Recorder | None, ready: Any = None) -> None:
    """Serve until cancelled; ``ready(port)`` is called once listening."""
    proxy = Proxy(config, capture)
    runner = web.AppRunner(proxy.app(), handle_signals=False, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, reuse_address=True)
    await site.start()
    try:
        port = runner.addresses[0][1]
        if ready is not None:
            ready(port)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@dataclass
class RunningProxy:
    """A proxy serving on its own thread and event loop (tests, benchmarks, embedding)."""

    url: str
    port: int
    capture: Capture | None
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    task: asyncio.Future[Any]

    def stop(self, timeout: float = 5.0) -> None:
        self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(timeout)


def start_in_thread(config: ProxyConfig, capture: Capture | None) -> RunningProxy:
    """Start a proxy on a daemon thread; returns once it listens (``config.port`` 0: any free port)."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    found: dict[str, Any] = {}

    def ready(port: int) -> None:
        found["port"] = port
        started.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        found["task"] = loop.create_task(serve(config, capture, ready))
        try:
            loop.run_until_complete(found["task"])
        except (asyncio.CancelledError, Exception) as exc:
            found.setdefault("error", exc)
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="ctxkit-proxy", daemon=True)
    thread.start()
    if not started.wait(10) or "port" not in found:
        raise RuntimeError(f"ctxkit proxy did not start: {found.get('error')!r}")
    port = found["port"]
    return RunningProxy(url=f"http://{config.host}:{port}", port=port, capture=capture, loop=loop, thread=thread,
                        task=found["task"])
