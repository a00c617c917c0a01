"""``ctxkit proxy``: a local capture proxy between any agent and its model provider.

Point an agent at it with one environment variable (``ANTHROPIC_BASE_URL=http://127.0.0.1:8788``,
``OPENAI_BASE_URL=http://127.0.0.1:8788/v1``, ``GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8788``):
requests and responses pass through unchanged, streams event by event, and each model call (of
the providers in ctxkit.providers) is recorded as a context manifest with the provider's mapping,
off the request path. ``options`` (the command line, no aiohttp), ``server`` (forwarding,
aiohttp), ``capture`` (exchange to manifest), ``history`` (a call's history, parsed once),
``runs`` (run and step), ``lru``, ``compactions``, ``secrets`` (masking).
Needs the ``proxy`` extra (``pip install 'ctxkit[proxy]'``); see docs/integrations.md.
"""
