"""``ctxkit.instrument(client)``: record a manifest for every call of an Anthropic, OpenAI or Google GenAI client.

This package implements it; ``ctxkit`` exports the entry point as ``ctxkit.instrument``.

    import anthropic, ctxkit
    client = ctxkit.instrument(anthropic.Anthropic())      # CTXVIEW_API_KEY / CTXVIEW_HOST from the env
    with ctxkit.instrument.run(run_id="ticket-4711", agent="refund-analyst", evidence={"rate": "0.0321"}):
        client.messages.create(...)                          # recorded; returns what the SDK returns

Records, on that client instance only, every model call of Anthropic ``messages`` and
``beta.messages`` and of OpenAI ``chat.completions`` and ``responses``, however the agent makes
it: ``create`` (``stream=True`` too), ``parse``, the ``stream(...)`` helpers (Anthropic's
``MessageStreamManager``, OpenAI's chat and responses stream managers) and
``with_raw_response`` / ``with_streaming_response``; sync and async clients; OpenAI's
``responses.stream(response_id=...)`` resuming a response; and the clients made from it with
``with_options(...)`` / ``copy(...)``. The hook is each resource's ``_post``, which all of these go
through (``ctxkit.instrumentation.wrap``); every style gives the manifest the plain ``create`` would. Per
call, ``ctxview={"run_id": ..., "agent": ..., "evidence": ..., "window": ...}`` is taken out of
the keyword arguments before the SDK sees them. A ``google-genai`` client's ``generate_content``
and ``generate_content_stream`` (sync and ``client.aio``) are recorded through its API client's
``request`` methods (``wrap.wrap_api_client``). Which resources to hook, and how, each provider's
module says (ctxkit.providers).

Without an API key (argument or ``CTXVIEW_API_KEY``) it returns the client untouched. It never
raises into the agent and never imports the provider SDKs itself (it inspects the client it is
given). See docs/integrations.md.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
from typing import Any, TypeVar

from ctxkit.instrumentation.recorder import Recorder, Scope, run
from ctxkit.manifest import Workspace, workspace_of
from ctxkit.providers import sdk_resources
from ctxkit.record.transport import ctxview_api_key, ctxview_host

logger = logging.getLogger("ctxkit")
__all__ = ["Instrument", "instrument", "run", "flush", "Scope"]

_recorders: dict[tuple[str, str], Recorder] = {}
_last: list[Recorder] = []
_exit_hook = False


def _recorder(api_key: str, host: str, ctxkit_client: Any, agent: str, run_id: str | None,
              include_text: bool, window: int | None, spool_dir: str | os.PathLike[str] | bool | None,
              workspace: Workspace | None = None) -> Recorder:
    if ctxkit_client is not None:
        recorder = Recorder(ctxkit_client, agent=agent, run_id=run_id, include_text=include_text, window=window,
                            workspace=workspace)
    else:
        cached = _recorders.get((api_key, host))
        if cached is not None and (cached.agent, cached.include_text, cached.window, cached.workspace) == \
                (agent, include_text, window, workspace) and (run_id is None or cached.default_run == run_id):
            return cached
        from ctxkit.record.client import Client

        shared = cached.client if cached is not None else Client(api_key, host, spool_dir=spool_dir)
        recorder = Recorder(shared, agent=agent, run_id=run_id, include_text=include_text, window=window,
                            workspace=workspace)
        _recorders.setdefault((api_key, host), recorder)
    _last.append(recorder)
    global _exit_hook
    if not _exit_hook:
        # Registered after ctxkit.record.client's own hook, so it runs first (atexit is LIFO):
        # what is still being built reaches the Client before the Client shuts down.
        atexit.register(flush, 2.0)
        _exit_hook = True
    return recorder


def _hook(client: Any, recorder: Recorder) -> None:
    """Record ``client``'s model calls with ``recorder``, and those of the clients it derives."""
    from ctxkit.instrumentation.wrap import warn_once, wrap, wrap_api_client

    for provider, (name, resource, paths, adapter, resumed) in sdk_resources(client):
        api_client = provider.HOOK == "api_client"
        ok = wrap_api_client(resource, paths, recorder, adapter, provider.with_path) if api_client \
            else wrap(resource, paths, recorder, adapter, resumed)
        if not ok:
            warn_once("ctxkit.instrument: %s.%s has no %s to hook (another SDK version?); its calls run "
                      "unrecorded", type(client).__name__, name, "request" if api_client else "_post")
    for name in _DERIVES:
        _derive(client, name, recorder)
    try:
        client.__ctxkit_instrumented__ = True
    except Exception:
        pass


# copy() and its alias with_options() make a new client (new resources, never hooked): the new
# client is hooked with the same recorder, so it records like its parent, once.
_DERIVES = ("copy", "with_options")


def _derive(client: Any, name: str, recorder: Recorder) -> None:
    original = getattr(client, name, None)
    if not callable(original):
        return

    @functools.wraps(original)
    def derive(*args: Any, **kwargs: Any) -> Any:
        derived = original(*args, **kwargs)
        try:
            if derived is not client and not getattr(derived, "__ctxkit_instrumented__", False):
                _hook(derived, recorder)
        except Exception:
            logger.warning("ctxkit.instrument: could not instrument the client from %s(); it runs unrecorded",
                           name, exc_info=True)
        return derived

    try:
        setattr(client, name, derive)
    except Exception:
        logger.warning("ctxkit.instrument: clients from %s() are not recorded", name)


def flush(timeout: float = 10.0) -> bool:
    """Wait until the calls recorded so far are built and sent (e.g. before a script exits)."""
    ok = True
    for recorder in {id(r): r for r in _last}.values():
        ok = recorder.flush(timeout) and ok
    return ok


ClientT = TypeVar("ClientT")


class Instrument:
    """``ctxkit.instrument``: ``instrument(client)`` records every call of ``client``;
    ``instrument.run(...)`` scopes the calls made inside to a run; ``instrument.flush()`` waits
    until what was recorded is sent."""

    def __call__(
        self,
        client: ClientT,
        *,
        api_key: str | None = None,
        host: str | None = None,
        agent: str = "default",
        run_id: str | None = None,
        include_text: bool = True,
        window: int | None = None,
        ctxkit_client: Any = None,
        spool_dir: str | os.PathLike[str] | bool | None = True,
        cwd: str = "",
        git_branch: str = "",
    ) -> ClientT:
        """Record every call of ``client``; returns the same client object.

        ``agent`` / ``run_id``: defaults for calls outside ``instrument.run(...)`` (the default
        run is one per process). ``include_text=False`` records tokens and hashes, never text.
        ``window``: the model's context window when ctxkit's table does not know it.
        ``ctxkit_client``: a configured :class:`ctxkit.Client` (spool, batch size, ...) instead of
        the one made from ``api_key`` / ``host``. ``spool_dir``: where manifests wait while ctxview
        is away (``True``, the default: a per-user folder for this host and key; ``None``: nowhere,
        they are dropped); the first ``instrument()`` call for a host and key decides. ``cwd`` /
        ``git_branch``: where the agent works, kept on its runs (shown and filterable on the runs
        list; a value the schema would refuse is left out).
        """
        try:
            if getattr(client, "__ctxkit_instrumented__", False):
                return client
            key = ctxview_api_key(api_key)
            if not key and ctxkit_client is None:
                logger.info("ctxkit.instrument: no CTXVIEW_API_KEY; calls are not recorded")
                return client
            sdk_resources(client)  # a client no provider knows: TypeError, before a recorder is made
            recorder = _recorder(key, ctxview_host(host), ctxkit_client,
                                 agent, run_id, include_text, window, spool_dir, workspace_of(cwd, git_branch))
            _hook(client, recorder)
        except Exception:
            logger.warning("ctxkit.instrument: could not instrument the client; it runs unrecorded", exc_info=True)
        return client

    run = staticmethod(run)
    flush = staticmethod(flush)


instrument = Instrument()
