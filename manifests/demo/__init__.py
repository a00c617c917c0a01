"""The demo project that ``make run`` loads (``manage.py seed_demo``): runs built with ctxkit
(``runs``), an agent on the real ``anthropic`` client recorded by ``ctxkit.instrument``
(``instrument``), and OpenTelemetry spans through ``/v1/traces``' mapping (``otlp``)."""
