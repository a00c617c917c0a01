"""Recording one SDK resource's model calls, on one client instance; sync, async and streams.

The hook point is the resource's ``_post`` (each SDK resource binds ``client.post`` on its
instance), through which every entry point makes its request: ``create`` and ``parse``; the
``stream()`` helpers, whose managers call ``partial(self._post, ...)`` (Anthropic) or
``self.create`` (OpenAI) on enter; ``with_raw_response`` / ``with_streaming_response``, which
call ``create`` / ``parse`` with a header that makes ``_post`` return an API response object.
Only the model-call paths are recorded (``count_tokens``, ``update`` ... pass through), and
only on this instance: the SDK's classes are never patched. OpenAI's ``responses`` also has its
``_get`` hooked, for the one streamed GET that is model output: ``responses.stream(response_id=...)``
resuming an existing response. A private attribute missing in another SDK version leaves that
resource unrecorded (wrap() returns False; instrument() logs a warning), never failing a call.

The public methods are wrapped only to take the ``ctxview={...}`` keyword out before the SDK
sees it; it reaches the hook through a context variable (carried into the coroutine or stream
manager the method returns, whose request is made later).

The hook returns exactly what ``_post`` returned (the same object, of the same type: a stream is
observed through its internal iterator, an API response through its own ``parse`` / ``close``
on that instance) and re-raises exactly what it raised. An API response's body is decoded for
the manifest on the builder thread, and only once the agent has read it.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from types import CoroutineType
from typing import Any

from ctxkit.instrumentation.recorder import Recorder
from ctxkit.providers.call import Adapter, CallRecord, is_api_response

_UNSET = ("Omit", "NotGiven")  # the SDKs' "argument not given" sentinels, left in the body dict
PUBLIC_METHODS = ("create", "parse", "stream", "retrieve")

_per_call: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ctxkit_instrument_per_call", default=None)
logger = logging.getLogger("ctxkit")
_warned: set[str] = set()


def warn_once(message: str, *args: Any) -> None:
    """Log a warning once per process (a with_options() client made per request would repeat it)."""
    text = message % args
    if text not in _warned:
        _warned.add(text)
        logger.warning(text)


UNREAD = "the agent did not read the response body: no usage or finish reason"


def _body_read(obj: Any) -> bool:
    try:
        obj.http_response.content  # noqa: B018 (raises instead of reading a streamed body)
    except Exception:
        return False
    return True


def _snapshot(body: Any) -> dict[str, Any]:
    """What the call sent, safe from the agent's appends after it (a shallow copy of its lists)."""
    if not isinstance(body, dict):
        return {}
    return {k: list(v) if type(v) is list else v for k, v in body.items()}


def _given(adapter: Adapter) -> Adapter:
    """The adapter, called on the builder thread with the SDK's not-given sentinels (``omit``,
    ``not_given``: a body carries one per parameter the agent left out) taken out first: not on
    the agent's thread, where it would cost a pass over every parameter of every call."""
    @functools.wraps(adapter)
    def build(record: CallRecord) -> Any:
        record.kwargs = {k: v for k, v in record.kwargs.items() if type(v).__name__ not in _UNSET}
        manifest = adapter(record)
        if manifest is not None and is_api_response(record.response) and not _body_read(record.response):
            # with_streaming_response left without reading: the request is known, the answer is not.
            manifest.warnings = [*manifest.warnings, UNREAD]
        return manifest
    return build


def _begin(recorder: Recorder, adapter: Adapter, body: Any, per_call: dict[str, Any] | None) -> CallRecord | None:
    try:
        return recorder.new_record(adapter, _snapshot(body), per_call)
    except Exception:
        return None


def _observe(stream: Any, record: CallRecord, recorder: Recorder, t0: float) -> bool:
    """Observe a stream's events through its internal iterator; False if it has none."""
    try:
        inner = stream._iterator
    except Exception:
        return False
    if inspect.isasyncgen(inner) or hasattr(inner, "__anext__"):
        stream._iterator = _observe_async(inner, record, recorder, t0)
    else:
        stream._iterator = _observe_sync(inner, record, recorder, t0)
    return True


def _observe_sync(inner: Iterator[Any], record: CallRecord, recorder: Recorder, t0: float) -> Iterator[Any]:
    events: list[Any] = []
    try:
        for event in inner:
            events.append(event)
            yield event
    except GeneratorExit:
        raise
    except BaseException as exc:
        record.error = exc
        raise
    finally:
        record.stream_events, record.duration = events, time.perf_counter() - t0
        recorder.submit(record)


async def _observe_async(inner: Any, record: CallRecord, recorder: Recorder, t0: float) -> AsyncIterator[Any]:
    events: list[Any] = []
    try:
        async for event in inner:
            events.append(event)
            yield event
    except GeneratorExit:
        raise
    except BaseException as exc:
        record.error = exc
        raise
    finally:
        record.stream_events, record.duration = events, time.perf_counter() - t0
        recorder.submit(record)


def _after(result: Any, then: Callable[[Any], None]) -> Any:
    """``then(value)`` once ``result`` is there: now, or when the agent awaits the coroutine
    (an async SDK's ``parse`` / ``close``); returns what the agent gets."""
    if type(result) is CoroutineType:
        async def _later() -> Any:
            value = await result
            then(value)
            return value
        return _later()
    then(result)
    return result


def _once(obj: Any, name: str, then: Callable[[Any], object]) -> None:
    """Run ``then`` after the first call of ``obj.<name>`` (set on this instance only)."""
    original = getattr(obj, name)
    done: list[bool] = []

    def guarded(value: Any) -> None:
        if not done:
            done.append(True)
            try:
                then(value)
            except Exception:
                pass

    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if done:
            return result
        try:
            return _after(result, guarded)
        except Exception:
            return result

    setattr(obj, name, method)


def _watch_api_response(response: Any, record: CallRecord, recorder: Recorder, stream: bool, t0: float) -> None:
    """``with_raw_response`` / ``with_streaming_response``: the agent got an API response object.
    Nothing is parsed or read for us on the agent's thread."""
    record.duration = time.perf_counter() - t0
    if stream:  # events are seen only through the Stream the agent's parse() returns
        _once(response, "parse", lambda parsed: _observe(parsed, record, recorder, t0))
        return
    record.response = response  # decoded on the builder thread (plain)
    if not _body_read(response):  # with_streaming_response: recorded when the agent closes it, with what it read
        _once(response, "close", lambda _: recorder.submit(record))
        return
    recorder.submit(record)


def _finish(record: CallRecord, recorder: Recorder, result: Any, stream: bool, t0: float) -> None:
    try:
        if is_api_response(result):
            _watch_api_response(result, record, recorder, stream, t0)
            return
        if stream and _observe(result, record, recorder, t0):
            return
        record.response, record.duration = result, time.perf_counter() - t0
        recorder.submit(record)
    except Exception:
        pass


def _failed(record: CallRecord, recorder: Recorder, exc: BaseException, t0: float) -> None:
    try:
        record.error, record.duration = exc, time.perf_counter() - t0
        recorder.submit(record)
    except Exception:
        pass


def _resumes(path: Any, prefix: str, kwargs: dict[str, Any]) -> bool:
    """A GET of ``<prefix><id>`` streamed: OpenAI's ``responses.stream(response_id=...)`` (and
    ``responses.retrieve(id, stream=True)``), resuming the events of an existing response."""
    return bool(kwargs.get("stream")) and isinstance(path, str) and path.startswith(prefix) \
        and "/" not in path[len(prefix):]


def _mark_wrapped(fn: Callable[..., Any]) -> None:
    """Mark ``fn`` as ctxkit's wrapper (``__ctxkit_wrapped__``), so a resource hooked twice is wrapped once."""
    fn.__dict__["__ctxkit_wrapped__"] = True


def _hook(resource: Any, attr: str, paths: Collection[str], recorder: Recorder, adapter: Adapter,
          resumes: str = "") -> bool:
    """Hook ``resource.<attr>`` (``_post``, or ``_get`` with ``resumes``); False if it cannot be
    (an SDK without that private attribute, or one that will not take an instance attribute)."""
    original = getattr(resource, attr, None)
    if original is None:
        return False
    if getattr(original, "__ctxkit_wrapped__", False):
        return True
    adapter = _given(adapter)

    async def _await(pending: Any, record: CallRecord, stream: bool) -> Any:
        # The async SDKs' post is a coroutine made where the request is prepared (for
        # AsyncMessageStreamManager in stream(), sent in __aenter__): the clock starts here.
        record.started, t0 = time.time(), time.perf_counter()
        try:
            result = await pending
        except BaseException as exc:
            _failed(record, recorder, exc, t0)
            raise
        _finish(record, recorder, result, stream, t0)
        return result

    @functools.wraps(original)
    def post(path: Any, *args: Any, **kwargs: Any) -> Any:
        if path not in paths and not (resumes and _resumes(path, resumes, kwargs)):
            return original(path, *args, **kwargs)
        record = _begin(recorder, adapter, kwargs.get("body"), _per_call.get())
        stream = bool(kwargs.get("stream"))
        t0 = time.perf_counter()
        try:
            result = original(path, *args, **kwargs)
        except BaseException as exc:
            if record is not None:
                _failed(record, recorder, exc, t0)
            raise
        if record is None:
            return result
        if type(result) is CoroutineType or hasattr(type(result), "__await__"):
            return _await(result, record, stream)
        _finish(record, recorder, result, stream, t0)
        return result

    _mark_wrapped(post)
    try:
        setattr(resource, attr, post)
        # A property in another SDK version may refuse the instance attribute, or ignore it.
        return getattr(resource, attr, None) is post
    except Exception:
        return False


async def _scoped_await(per_call: dict[str, Any], pending: Any) -> Any:
    token = _per_call.set(per_call)
    try:
        return await pending
    finally:
        _per_call.reset(token)


def _scoped_call(per_call: dict[str, Any], request: Callable[[], Any]) -> Callable[[], Any]:
    @functools.wraps(request)
    def call(*args: Any, **kwargs: Any) -> Any:
        token = _per_call.set(per_call)
        try:
            return request(*args, **kwargs)
        finally:
            _per_call.reset(token)
    return call


def _carry(result: Any, per_call: dict[str, Any]) -> Any:
    """Per-call settings into a request made after the method returned: a coroutine the agent
    awaits, or a stream manager's pending request (its private ``__api_request``)."""
    if type(result) is CoroutineType:
        return _scoped_await(per_call, result)
    found = False
    for name, value in list(vars(result).items()) if hasattr(result, "__dict__") else ():
        if name.endswith("__api_request"):
            found = True
            if inspect.isawaitable(value):
                setattr(result, name, _scoped_await(per_call, value))
            elif callable(value):
                setattr(result, name, _scoped_call(per_call, value))
    kind = type(result).__name__
    if not found and kind.endswith("StreamManager"):
        # Another SDK version: the call is still recorded, under the scope's settings.
        warn_once("ctxkit.instrument: %s keeps no __api_request; ctxview={...} does not reach its request", kind)
    return result


def _take_ctxview(resource: Any, name: str) -> None:
    original = getattr(resource, name, None)
    if original is None or getattr(original, "__ctxkit_wrapped__", False):
        return

    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        per_call = kwargs.pop("ctxview", None)
        if not isinstance(per_call, dict):
            return original(*args, **kwargs)
        token = _per_call.set(per_call)
        try:
            result = original(*args, **kwargs)
        finally:
            _per_call.reset(token)
        try:
            return _carry(result, per_call)
        except Exception:
            return result

    _mark_wrapped(method)
    try:
        setattr(resource, name, method)
    except Exception:  # ctxview={...} then reaches the SDK, which rejects it: as without ctxkit
        pass


def wrap(resource: Any, paths: Collection[str], recorder: Recorder, adapter: Adapter,
         resumed: tuple[str, Adapter] | None = None) -> bool:
    """Record ``resource``'s model calls (requests to ``paths``), on this instance; with
    ``resumed=(prefix, adapter)`` also the streamed GETs of ``<prefix><id>``. False if the
    resource's ``_post`` could not be hooked: its calls then go unrecorded, unchanged."""
    ok = _hook(resource, "_post", paths, recorder, adapter)
    if resumed is not None and not _hook(resource, "_get", (), recorder, resumed[1], resumes=resumed[0]):
        warn_once("ctxkit.instrument: %s has no _get to hook; resumed streams are not recorded",
                  type(resource).__name__)
    for name in PUBLIC_METHODS:
        _take_ctxview(resource, name)
    return ok


# --------------------------------------------------------------------------- #
# A client whose model calls go through one API client (google-genai): its request methods


def _bodies(stream: Iterator[Any], record: CallRecord, recorder: Recorder, t0: float) -> Iterator[Any]:
    """The chunks of a streamed call as the agent reads them; their bodies kept for the mapping."""
    events: list[Any] = []
    record.stream_events = events
    try:
        for chunk in stream:
            events.append(getattr(chunk, "body", chunk))
            yield chunk
    except BaseException as exc:
        record.error = exc if not isinstance(exc, GeneratorExit) else None
        raise
    finally:
        record.duration = time.perf_counter() - t0
        recorder.submit(record)


async def _async_bodies(stream: Any, record: CallRecord, recorder: Recorder, t0: float) -> AsyncIterator[Any]:
    events: list[Any] = []
    record.stream_events = events
    try:
        async for chunk in stream:
            events.append(getattr(chunk, "body", chunk))
            yield chunk
    except BaseException as exc:
        record.error = exc if not isinstance(exc, GeneratorExit) else None
        raise
    finally:
        record.duration = time.perf_counter() - t0
        recorder.submit(record)


def wrap_api_client(api_client: Any, methods: Collection[str], recorder: Recorder, adapter: Adapter,
                    with_path: Callable[[dict[str, Any], str], dict[str, Any]]) -> bool:
    """Record the model calls an API client makes (``request`` / ``request_streamed`` and their
    async twins, called with the HTTP method, the path, the request body and options): those
    whose path names one of ``methods`` (``:generateContent``, ...), on this instance. The body
    the mapping reads is ``with_path(body, path)``; a response's body (a chunk's, streamed) is
    kept as the text the SDK read and decoded on the builder thread. False if the client has
    none of these methods."""
    adapter = _given(adapter)
    hooked = False

    def recorded(path: Any) -> bool:
        return isinstance(path, str) and any(m in path for m in methods)

    def begin(body: Any, path: str) -> CallRecord | None:
        try:
            return recorder.new_record(adapter, with_path(_snapshot(body), path), _per_call.get())
        except Exception:
            return None

    def hook(name: str, make: Callable[[Any], Any]) -> None:
        nonlocal hooked
        original = getattr(api_client, name, None)
        if original is None or getattr(original, "__ctxkit_wrapped__", False):
            hooked = hooked or original is not None
            return
        method = make(original)
        method.__ctxkit_wrapped__ = True
        functools.update_wrapper(method, original)
        try:
            setattr(api_client, name, method)
            hooked = True
        except Exception:
            pass

    def sync_request(original: Any) -> Any:
        def request(http_method: Any, path: Any, request_dict: Any, *args: Any, **kwargs: Any) -> Any:
            record = begin(request_dict, path) if recorded(path) else None
            if record is None:
                return original(http_method, path, request_dict, *args, **kwargs)
            t0 = time.perf_counter()
            try:
                result = original(http_method, path, request_dict, *args, **kwargs)
            except BaseException as exc:
                _failed(record, recorder, exc, t0)
                raise
            record.response, record.duration = getattr(result, "body", None), time.perf_counter() - t0
            recorder.submit(record)
            return result
        return request

    def sync_streamed(original: Any) -> Any:
        def request_streamed(http_method: Any, path: Any, request_dict: Any, *args: Any, **kwargs: Any) -> Any:
            record = begin(request_dict, path) if recorded(path) else None
            if record is None:
                return original(http_method, path, request_dict, *args, **kwargs)
            t0 = time.perf_counter()
            try:
                stream = original(http_method, path, request_dict, *args, **kwargs)
            except BaseException as exc:
                _failed(record, recorder, exc, t0)
                raise
            return _bodies(stream, record, recorder, t0)
        return request_streamed

    def async_request(original: Any) -> Any:
        async def request(http_method: Any, path: Any, request_dict: Any, *args: Any, **kwargs: Any) -> Any:
            record = begin(request_dict, path) if recorded(path) else None
            if record is None:
                return await original(http_method, path, request_dict, *args, **kwargs)
            record.started, t0 = time.time(), time.perf_counter()
            try:
                result = await original(http_method, path, request_dict, *args, **kwargs)
            except BaseException as exc:
                _failed(record, recorder, exc, t0)
                raise
            record.response, record.duration = getattr(result, "body", None), time.perf_counter() - t0
            recorder.submit(record)
            return result
        return request

    def async_streamed(original: Any) -> Any:
        async def request_streamed(http_method: Any, path: Any, request_dict: Any, *args: Any, **kwargs: Any) -> Any:
            record = begin(request_dict, path) if recorded(path) else None
            if record is None:
                return await original(http_method, path, request_dict, *args, **kwargs)
            record.started, t0 = time.time(), time.perf_counter()
            try:
                stream = await original(http_method, path, request_dict, *args, **kwargs)
            except BaseException as exc:
                _failed(record, recorder, exc, t0)
                raise
            return _async_bodies(stream, record, recorder, t0)
        return request_streamed

    hook("request", sync_request)
    hook("request_streamed", sync_streamed)
    hook("async_request", async_request)
    hook("async_request_streamed", async_streamed)
    return hooked
