"""The OpenAPI document's parts that drf-spectacular cannot infer (docs/api.md):

- the bearer security scheme of :class:`manifests.api.auth.ApiKeyAuthentication`;
- the error responses of every operation, all in the one documented shape;
- the ingest body, described by the manifest's own JSON Schema (generated from the
  msgspec types ctxkit and the server share), not as a bare object.
"""

from __future__ import annotations

from typing import Any

import msgspec
from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.renderers import OpenApiJsonRenderer, OpenApiYamlRenderer

from ctxkit.manifest import Manifest


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "manifests.api.auth.ApiKeyAuthentication"
    name = "projectKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "ctx_...",
            "description": "A project API key (manage.py createproject); scopes ingest, read and/or configure.",
        }


ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "errors"],
    "properties": {
        "error": {"type": "string", "description": "What is wrong, in one sentence"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "message"],
                "properties": {
                    "path": {"type": "string", "description": "JSON path of the bad field ($.items[3].id) or ?param"},
                    "message": {"type": "string"},
                },
            },
        },
    },
}

COMMON_ERRORS = {
    "400": "A bad parameter or body; `errors` names each bad field or parameter",
    "401": "No API key, or a bad or revoked one",
    "403": "The key lacks the scope (ingest, read or configure)",
    "404": "No such run, call, alert rule or watched fact in the key's project",
    "429": "Over the key's request rate; wait `Retry-After` seconds and resend",
    "500": "A server fault (logged); the body has the same shape",
}
INGEST_ERRORS = {
    "411": "A chunked body on a server that cannot read one; send Content-Length",
    "413": "The body (compressed or not) is over CTXVIEW_MAX_BODY_BYTES, or the batch over CTXVIEW_MAX_BATCH",
    "415": "Not JSON, or a Content-Encoding other than gzip",
    "503": "The database stayed contended after bounded retries; wait `Retry-After` seconds and resend",
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def postprocess(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook (SPECTACULAR_SETTINGS)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    # Namespaced: the read serializers have components called Item, Evidence, ... too.
    _, components = msgspec.json.schema_components([Manifest], ref_template="#/components/schemas/manifest.{name}")
    schemas.update({f"manifest.{name}": schema for name, schema in components.items()})
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            errors = dict(COMMON_ERRORS)
            if path == "/api/v1/manifests" and method == "post":
                errors.pop("404")
                errors.update(INGEST_ERRORS)
                operation["requestBody"] = _ingest_body()
                # The body answers 400 with the per-manifest results when every manifest was
                # rejected, or with the error shape when the body as a whole is unusable.
                ok = responses.get("200", {}).get("content", {}).get("application/json", {}).get("schema")
                if ok:
                    errors_400 = {"oneOf": [ok, _ERROR_REF]}
                    responses["400"] = {"description": COMMON_ERRORS["400"],
                                        "content": {"application/json": {"schema": errors_400}}}
            for code, description in errors.items():
                responses.setdefault(code, {"description": description,
                                            "content": {"application/json": {"schema": _ERROR_REF}}})
    return result


def _ingest_body() -> dict[str, Any]:
    manifest = {"$ref": "#/components/schemas/manifest.Manifest"}
    batch = {
        "type": "object",
        "required": ["manifests"],
        "additionalProperties": False,
        "properties": {
            "manifests": {"type": "array", "items": manifest, "minItems": 1, "maxItems": settings.CTXVIEW_MAX_BATCH}
        },
    }
    return {
        "required": True,
        "description": "One manifest (ctxview.manifest/v1) or a batch. Content-Encoding: gzip is accepted.",
        "content": {"application/json": {"schema": {"oneOf": [manifest, batch]}}},
    }


class BrowserYamlRenderer(OpenApiYamlRenderer):
    """The YAML document as text/plain, so a browser shows it instead of downloading it."""

    media_type = "text/plain"


class BrowserJsonRenderer(OpenApiJsonRenderer):
    media_type = "application/json"
