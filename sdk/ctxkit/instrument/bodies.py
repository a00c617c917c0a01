"""The manifest of one model call given as plain JSON: the request body, and the response body
or the streamed events, as parsed dicts.

The second entry point into the one mapping of ``ctxkit.instrument`` (anthropic.py, openai.py):
``instrument(client)`` hands those adapters the SDK's objects, ``ctxkit proxy`` hands them the
bodies it forwarded; both give the same items, prefix segments, usage, context edits,
compactions and outcome for the same call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ctxkit.instrument import anthropic, openai
from ctxkit.instrument._recorder import CallRecord
from ctxkit.record.manifest import Manifest

__all__ = ["APIS", "ProviderError", "manifest_from_bodies"]

# What each recorded API's adapter is: Anthropic Messages, OpenAI Chat Completions and Responses,
# and a resumed Responses stream (GET /v1/responses/{id}?stream=true: no request body).
APIS: dict[str, Callable[[CallRecord], Manifest]] = {
    "anthropic.messages": anthropic.manifest,
    "openai.chat": openai.chat_manifest,
    "openai.responses": openai.responses_manifest,
    "openai.responses.resumed": openai.resumed_manifest,
}


class ProviderError(Exception):
    """A call that did not succeed: the provider's HTTP status (0: no answer at all) and its
    error type (``rate_limit_error``, ``overloaded_error``, ...) when the body names one."""

    def __init__(self, status_code: int, error_type: str = "") -> None:
        super().__init__(f"HTTP {status_code} {error_type}".strip())
        self.status_code = status_code or None
        self.error_type = error_type


def manifest_from_bodies(
    api: str,
    request: dict[str, Any],
    *,
    response: dict[str, Any] | None = None,
    events: list[dict[str, Any]] | None = None,
    error: BaseException | None = None,
    call_id: str = "",
    run_id: str,
    step: int,
    agent: str = "default",
    started: float,
    duration: float = 0.0,
    include_text: bool = True,
    window: int | None = None,
    evidence: list[str] | dict[str, str] | None = None,
) -> Manifest:
    """The manifest of one call of ``api`` (a key of :data:`APIS`). ``events``: the data of each
    server-sent event of a streamed response, in order (``response`` is then ignored);
    ``started``: ``time.time()`` when the request was sent; ``duration`` in seconds."""
    record = CallRecord(APIS[api], dict(request), run_id, step, agent, evidence, window, include_text, started,
                        duration=duration, response=response, error=error, stream_events=events,
                        _call_id=call_id)
    return record.adapter(record)
