"""One model call as a provider's mapping reads it, and reading SDK objects and JSON alike.

``ctxkit.instrument`` hands the mappings the SDK's objects (pydantic models, API response
objects, stream events as objects); ``ctxkit proxy`` hands them the parsed JSON it forwarded.
:func:`plain` and :func:`field` make both read the same.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ctxkit.proxy.lru import ObjectMemo

__all__ = ["CallRecord", "Adapter", "plain", "field", "is_api_response"]


@dataclass(slots=True)
class CallRecord:
    """One model call as seen on the agent's thread; turned into a manifest later."""

    adapter: Callable[[CallRecord], Any]  # builds the manifest
    kwargs: dict[str, Any]
    run_id: str
    step: int
    agent: str
    evidence: list[str] | dict[str, str] | None
    window: int | None
    include_text: bool
    started: float  # time.time()
    duration: float = 0.0
    response: Any = None
    error: BaseException | None = None
    stream_events: list[Any] | None = None
    _call_id: str = ""
    json_kwargs: bool = False  # ``kwargs`` is parsed JSON already (the proxy's and the importer's bodies)
    # What the mapping may remember of the request's objects from call to call: given only by a
    # caller whose requests share objects nobody changes (``ctxkit import``).
    shared: ObjectMemo[Any] | None = None

    def params(self) -> dict[str, Any]:
        """The call's parameters as plain JSON: the SDK's objects (pydantic models) as dicts and lists."""
        return self.kwargs if self.json_kwargs else {k: plain(v) for k, v in self.kwargs.items()}

    @property
    def call_id(self) -> str:
        # Made on the builder thread, on first use: a uuid4 costs microseconds the agent should not pay.
        if not self._call_id:
            self._call_id = uuid.uuid4().hex
        return self._call_id

    def id_for(self, answered: str) -> str:
        """The call's id: the one it was given, else ``answered`` (the provider's id of its answer,
        ``""`` without one), else a uuid4; the same on every later use."""
        if not self._call_id:
            self._call_id = answered or uuid.uuid4().hex
        return self._call_id

    @property
    def started_at(self) -> datetime:
        return datetime.fromtimestamp(self.started, tz=UTC)

    @property
    def ended_at(self) -> datetime:
        return self.started_at + timedelta(seconds=self.duration)


Adapter = Callable[[CallRecord], Any]


def _drop_none(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _drop_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list):
        return [_drop_none(v) for v in obj]
    return obj


def _response_json(obj: Any) -> Any:
    """An API response object's body as the model's dump would be (``None`` left out), or None
    when the agent has not read it: ``content`` raises instead of reading a streamed body."""
    try:
        content = obj.http_response.content
    except Exception:
        return None
    try:
        return _drop_none(json.loads(content))
    except ValueError:
        return None


def is_api_response(obj: Any) -> bool:
    # Looked up on the class first: a missing attribute of a pydantic model (the common result)
    # goes through its slow __getattr__.
    cls = type(obj)
    return not hasattr(cls, "model_dump") and callable(getattr(cls, "parse", None)) and hasattr(obj, "http_response")


def plain(obj: Any) -> Any:
    """SDK objects (pydantic) as dicts and lists; dicts and lists as they are; an API response
    object (``with_raw_response`` / ``with_streaming_response``) as its decoded body."""
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:  # warnings=False: a parse() result's generic field warns on the builder thread otherwise
            return dump(mode="python", exclude_none=True, warnings=False)
        except TypeError:
            return dump()
    if is_api_response(obj):
        return _response_json(obj)
    return obj


def field(obj: Any, name: str) -> Any:
    """``obj[name]`` of a parsed JSON event (a dict), ``obj.name`` of an SDK event object: the
    adapters read streamed events of both kinds (instrument() sees objects, the proxy dicts)."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
