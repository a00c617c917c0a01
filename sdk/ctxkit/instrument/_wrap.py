"""Wrapping one SDK method (``create``) so each call is recorded; sync, async and streams.

The wrapper returns exactly what the SDK returned (the same object; a stream keeps its type:
only its internal iterator is observed) and re-raises exactly what it raised. The popped
``ctxview={...}`` keyword carries per-call run / agent / evidence / window.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import CoroutineType
from typing import Any

from ctxkit.instrument._recorder import CallRecord, Recorder

Adapter = Callable[[CallRecord], Any]
_LIST_ARGS = ("messages", "input", "tools", "system")


def plain(obj: Any) -> Any:
    """SDK objects (pydantic) as dicts and lists; dicts and lists as they are."""
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="python", exclude_none=True)
        except TypeError:
            return dump()
    return obj


def _snapshot(kwargs: dict[str, Any]) -> dict[str, Any]:
    """What the call sent, safe from the agent's appends after it (a shallow copy of lists)."""
    snap = dict(kwargs)
    for name in _LIST_ARGS:
        value = snap.get(name)
        if isinstance(value, list):
            snap[name] = list(value)
    return snap


def _begin(recorder: Recorder, adapter: Adapter, kwargs: dict[str, Any]) -> CallRecord | None:
    per_call = kwargs.pop("ctxview", None)
    try:
        return recorder.new_record(adapter, _snapshot(kwargs), per_call if isinstance(per_call, dict) else None)
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


def _finish(record: CallRecord, recorder: Recorder, result: Any, kwargs: dict[str, Any], t0: float) -> None:
    try:
        if kwargs.get("stream") and _observe(result, record, recorder, t0):
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


def wrap(resource: Any, name: str, recorder: Recorder, adapter: Adapter) -> None:
    """Replace ``resource.<name>`` (a bound SDK method) by a recording wrapper, on this instance."""
    original = getattr(resource, name, None)
    if original is None or getattr(original, "__ctxkit_wrapped__", False):
        return
    # The async clients' methods are plain functions returning a coroutine (decorated), so
    # the one wrapper tells sync from async by the result, not by the function.

    async def _await(pending: Any, record: CallRecord, kwargs: dict[str, Any], t0: float) -> Any:
        try:
            result = await pending
        except BaseException as exc:
            _failed(record, recorder, exc, t0)
            raise
        _finish(record, recorder, result, kwargs, t0)
        return result

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        record = _begin(recorder, adapter, kwargs)
        t0 = time.perf_counter()
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            if record is not None:
                _failed(record, recorder, exc, t0)
            raise
        if record is None:
            return result
        if type(result) is CoroutineType or hasattr(type(result), "__await__"):
            return _await(result, record, kwargs, t0)
        _finish(record, recorder, result, kwargs, t0)
        return result

    wrapper.__ctxkit_wrapped__ = True  # type: ignore[attr-defined]
    setattr(resource, name, wrapper)
