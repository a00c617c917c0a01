"""The manifest of one model call given as plain JSON: the request body, and the response body
or the streamed events, as parsed dicts.

The second entry point into the one mapping of each provider (ctxkit.providers):
``instrument(client)`` hands the mappings the SDK's objects, ``ctxkit proxy`` hands them the
bodies it forwarded; both give the same items, prefix segments, usage, context edits,
compactions and outcome for the same call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctxkit.manifest import Manifest
from ctxkit.providers import adapter, for_api
from ctxkit.providers.call import CallRecord

if TYPE_CHECKING:
    from ctxkit.proxy.lru import ObjectMemo

__all__ = ["ProviderError", "manifest_from_bodies", "well_formed"]


def well_formed(api: str, request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``request`` without the fields ``api``'s mapping cannot read (a number where a list
    belongs, a message that is not an object, ...), and a warning naming each one's JSON path."""
    return for_api(api).well_formed(request)


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
    shared: ObjectMemo[Any] | None = None,
) -> Manifest:
    """The manifest of one call of ``api`` (a recorded API of ctxkit.providers). ``events``: the data of each
    server-sent event of a streamed response, in order (``response`` is then ignored);
    ``started``: ``time.time()`` when the request was sent; ``duration`` in seconds; ``shared``: what
    the mapping may remember of the request's objects (:attr:`CallRecord.shared`)."""
    request, notes = well_formed(api, request)
    record = CallRecord(adapter(api), request, run_id, step, agent, evidence, window, include_text, started,
                        duration=duration, response=response, error=error, stream_events=events,
                        _call_id=call_id, json_kwargs=True, shared=shared)
    manifest: Manifest = record.adapter(record)
    if notes:
        manifest.warnings = [*manifest.warnings, *notes][:100]
    return manifest
