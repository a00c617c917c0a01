"""One module per wire format a model call can take, and the registry the rest of ctxkit asks.

Each module (``anthropic``, ``openai_chat``, ``openai_responses``, ``gemini``) owns everything about its
API: which requests are its (routing by path and headers, and which of them are recorded
model calls), the request as items and prefix segments, the response or stream as answer,
usage and finish, its error shapes, whether a call streams, its compaction markers, the names
of its tool definitions, and the resources of its SDK that ``ctxkit.instrument`` hooks. The
proxy (``ctxkit.proxy``), ``ctxkit.instrument`` and the server's cache words go through
:data:`PROVIDERS` and the functions here; none of them names an API's shapes itself.

Adding a provider: one module here with the attributes of :class:`Provider`, listed in
:data:`PROVIDERS`; its stand-in in the tests; a row in docs/integrations.md.
"""

from __future__ import annotations

from typing import Any, Protocol

from ctxkit.providers import anthropic, gemini, openai_chat, openai_responses
from ctxkit.providers.call import Adapter
from ctxkit.providers.common import Message, ToolCall
from ctxkit.record.call_items import Part

__all__ = ["PROVIDERS", "Provider", "Resource", "UPSTREAMS", "adapter", "error_body", "for_api", "guess_provider",
           "request_parts", "route", "sdk_resources", "tool_name"]

Resource = tuple[str, Any, tuple[str, ...], Adapter, tuple[str, Adapter] | None]


class Provider(Protocol):
    """What a provider's module holds (a module is the implementation)."""

    NAME: str  # the wire format
    UPSTREAM: str  # the proxy's upstream its requests go to (``--<UPSTREAM>-upstream``)
    SDK: str  # the module of its Python SDK's clients (``ctxkit.instrument``)
    HOOK: str  # how ctxkit.instrument hooks them: "post" (each resource's _post), "api_client"
    APIS: dict[str, Adapter]  # the recorded APIs and their mapping to a manifest

    def claims(self, path: str, headers: Any) -> bool: ...
    def recorded(self, method: str, path: str, query: str) -> str: ...
    def with_path(self, request: dict[str, Any], path: str) -> dict[str, Any]: ...
    def streamed(self, api: str, request: dict[str, Any], path: str) -> bool: ...
    def well_formed(self, request: dict[str, Any]) -> tuple[dict[str, Any], list[str]]: ...
    def history(self, api: str, request: dict[str, Any]) -> list[Any]: ...
    def message(self, entry: Any) -> Message: ...
    def normal(self, entry: Any) -> Any: ...
    def previous(self, request: dict[str, Any]) -> str: ...
    def read_events(self, text: str) -> tuple[list[dict[str, Any]], int]: ...
    def answer_text(self, response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str: ...
    def tool_calls(self, response: dict[str, Any] | None, events: list[dict[str, Any]] | None,
                   wanted: Any = None) -> list[ToolCall]: ...
    def response_id(self, api: str, response: dict[str, Any] | None, events: list[dict[str, Any]] | None) -> str: ...
    def error_type(self, payload: Any) -> str: ...
    def stream_error(self, events: list[dict[str, Any]]) -> str: ...
    def error_body(self, message: str) -> bytes: ...
    def tool_name(self, tool: Any) -> str | None: ...
    def sdk_resources(self, client: Any) -> list[Resource]: ...


# In routing order: the first that claims a request has it; OpenAI's upstream takes the rest.
_ANTHROPIC: Provider = anthropic
_GEMINI: Provider = gemini
_OPENAI_CHAT: Provider = openai_chat
_OPENAI_RESPONSES: Provider = openai_responses
PROVIDERS: tuple[Provider, ...] = (_ANTHROPIC, _GEMINI, _OPENAI_CHAT, _OPENAI_RESPONSES)
DEFAULT_UPSTREAM = openai_chat.UPSTREAM
UPSTREAMS: tuple[str, ...] = tuple(dict.fromkeys(p.UPSTREAM for p in PROVIDERS))
_BY_API: dict[str, Provider] = {api: p for p in PROVIDERS for api in p.APIS}


def for_api(api: str) -> Provider:
    """The provider of a recorded API (a key of some provider's ``APIS``)."""
    return _BY_API[api]


def adapter(api: str) -> Adapter:
    """The mapping of a recorded API to a manifest."""
    return _BY_API[api].APIS[api]


def route(method: str, path: str, query: str, headers: Any) -> tuple[Provider, str]:
    """(the provider whose upstream serves the request, the recorded API or ``""``)."""
    upstream = next((p.UPSTREAM for p in PROVIDERS if p.claims(path, headers)), DEFAULT_UPSTREAM)
    owners = [p for p in PROVIDERS if p.UPSTREAM == upstream]
    for provider in owners:
        api = provider.recorded(method, path, query)
        if api:
            return provider, api
    return owners[0], ""


def error_body(upstream: str, message: str) -> bytes:
    """An error in the shape the clients of ``upstream`` read."""
    return next(p for p in PROVIDERS if p.UPSTREAM == upstream).error_body(message)


def tool_name(tool: Any) -> str | None:
    """The name of a tool definition (parsed JSON), in whichever provider's shape it is."""
    for provider in PROVIDERS:
        name = provider.tool_name(tool)
        if name:
            return name
    return None


def guess_provider(params: dict[str, Any]) -> str:
    """The provider whose shapes a request's parameters use: ``anthropic`` (a top-level
    ``system``, ``input_schema`` tools, ``cache_control`` breakpoints), ``gemini`` (``contents``,
    ``systemInstruction``), else ``openai`` (Chat ``messages`` or Responses ``input``)."""
    if anthropic.is_request(params):
        return anthropic.NAME
    if gemini.is_request(params):
        return gemini.NAME
    return "openai"


def request_parts(provider: str, params: dict[str, Any]) -> tuple[list[Part], list[tuple[str, str]]]:
    """A request's parts and prefix segments, by the mapping of ``provider`` (``anthropic``,
    ``gemini`` / ``google``, or ``openai``: Responses when the parameters are a Responses request,
    else Chat Completions)."""
    if provider == anthropic.NAME:
        return anthropic.request_parts(params)
    if provider in (gemini.NAME, "google"):
        return gemini.request_parts(params)
    if openai_responses.is_request(params):
        return openai_responses.responses_parts(params)
    return openai_chat.chat_parts(params)


def sdk_resources(client: Any) -> list[tuple[Provider, Resource]]:
    """(its provider, resource) for each resource of a provider SDK's client that
    ``ctxkit.instrument`` hooks (as the provider's ``HOOK`` says); TypeError for a client no
    provider knows."""
    module = type(client).__module__
    found = [(p, r) for p in PROVIDERS if module == p.SDK or module.startswith(p.SDK + ".")
             for r in p.sdk_resources(client)]
    if not found:
        known = ", ".join(dict.fromkeys(p.SDK for p in PROVIDERS))
        raise TypeError(f"{module}.{type(client).__name__} is not a client of {known}")
    return found
