"""The manifest's JSON Schema and the OpenAPI schema are published and agree with the code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.test import Client

from ctxkit.manifest import json_schema

ROOT = Path(__file__).resolve().parents[2]


def test_the_json_schema_file_matches_the_code():
    on_disk = json.loads((ROOT / "docs" / "manifest.schema.json").read_text())
    # Regenerate: json.dumps(json_schema(), indent=2, sort_keys=True) into docs/manifest.schema.json
    assert on_disk == json_schema()


@pytest.mark.django_db
def test_it_publishes_the_json_schema_at_a_stable_url():
    r = Client().get("/api/v1/schema/manifest.json")
    assert r.status_code == 200
    assert json.loads(r.content) == json_schema()


@pytest.mark.django_db
def test_it_publishes_the_openapi_schema():
    r = Client().get("/api/schema/", HTTP_ACCEPT="application/json")
    assert r.status_code == 200
    spec = json.loads(r.content)
    assert "/api/v1/manifests" in spec["paths"]
    assert "/api/v1/calls/{call_id}" in spec["paths"]
    breakdown = spec["components"]["schemas"]["CallDetail"]["properties"]["window_breakdown"]
    assert "null" in breakdown["type"] and breakdown["properties"]["categories"]["items"]["properties"][
        "category"]["enum"][-2:] == ["unitemized", "free"]


def test_the_docs_example_is_a_valid_manifest():
    from ctxkit.manifest import convert_manifest

    text = (ROOT / "docs" / "manifest.md").read_text()
    example = text.split("```json", 1)[1].split("```", 1)[0]
    manifest, errors = convert_manifest(json.loads(example))
    assert errors == [] and manifest is not None
