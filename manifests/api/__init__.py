"""HTTP for programs: the REST views (``views``), the OTLP/HTTP trace endpoint (``otlp``), and
what DRF plugs in around them: key authentication and scopes (``auth``), per-key throttling
(``throttling``), bounded pagination (``pagination``), serializers of stored rows
(``serializers``) and the OpenAPI document's adjustments (``openapi``)."""
