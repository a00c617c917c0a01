"""``ctxkit proxy``: a local capture proxy between any agent and its model provider.

Point an agent at it with one environment variable (``ANTHROPIC_BASE_URL=http://127.0.0.1:8788``,
``OPENAI_BASE_URL=http://127.0.0.1:8788/v1``): requests and responses pass through unchanged,
streams event by event, and each model call (Anthropic Messages, OpenAI Chat Completions and
Responses) is recorded as a context manifest with ``ctxkit.instrument``'s mapping, off the
request path. ``options`` (the command line, no aiohttp), ``server`` (forwarding, aiohttp),
``capture`` (exchange to manifest), ``runs`` (run and step), ``secrets`` (masking), ``sse``.
Needs the ``proxy`` extra (``pip install 'ctxkit[proxy]'``); see docs/integrations.md.
"""
