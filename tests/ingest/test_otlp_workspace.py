"""OTLP ingest: where the agent worked, by OpenTelemetry's semantic conventions
(``process.working_directory``, ``vcs.ref.head.name``), on the span or its resource, reaches the run."""

from __future__ import annotations

import json

import pytest

from manifests.models import Run


def _attributes(values: dict[str, str]) -> list[dict]:
    return [{"key": k, "value": {"stringValue": v}} for k, v in values.items()]


def _export(trace: str, resource: dict[str, str], span: dict[str, str]) -> bytes:
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-sonnet-4-5",
            "gen_ai.conversation.id": f"conv-{trace}", **span}
    one = {"traceId": trace * 32, "spanId": "01" * 8, "name": "chat", "startTimeUnixNano": "1764410400000000000",
           "endTimeUnixNano": "1764410401000000000", "attributes": _attributes(chat)}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": _attributes(resource)},
                                          "scopeSpans": [{"spans": [one]}]}]}).encode()


@pytest.mark.django_db
def test_it_takes_the_folder_and_branch_from_the_span_or_its_resource(client, key, project):
    exports = [
        _export("a", {"process.working_directory": "/srv/agent", "vcs.ref.head.name": "main"}, {}),
        _export("b", {"process.working_directory": "/srv/agent"}, {"vcs.ref.head.name": "feat/x",
                                                                     "process.working_directory": "/srv/own"}),
        _export("c", {}, {"vcs.ref.head.name": "v1.2.0", "vcs.ref.type": "tag"}),  # a tag is no branch
    ]
    for body in exports:
        r = client.post("/v1/traces", data=body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {key}")
        assert r.status_code == 200, r.content
    places = {run.run_id: (run.cwd, run.git_branch) for run in Run.objects.filter(project=project)}
    assert places == {"conv-a": ("/srv/agent", "main"), "conv-b": ("/srv/own", "feat/x"), "conv-c": ("", "")}
