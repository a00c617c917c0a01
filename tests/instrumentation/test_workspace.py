"""``ctxkit.instrument(client, cwd=..., git_branch=...)``: where the agent works reaches its runs. The
real anthropic client talks to the local stand-in provider; the run is read back from a live server."""

from __future__ import annotations

import json
import urllib.request

import pytest

import ctxkit
from tests.instrumentation.test_clients import anthropic_client
from tests.instrumentation.test_helpers import A


def runs(live_server, key: str) -> dict[str, tuple[str, str]]:
    request = urllib.request.Request(f"{live_server.url}/api/v1/runs", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return {r["run_id"]: (r["cwd"], r["git_branch"]) for r in json.loads(response.read())["results"]}


@pytest.mark.django_db(transaction=True)
def test_it_keeps_the_folder_and_branch_it_was_given_on_the_run(live_server, key, standin, sender):
    client = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, run_id="place-run",
                               cwd="/home/dev/src/refunds", git_branch="fix/\x1frounding")
    client.messages.create(**A)
    bare = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, run_id="bare-run")
    bare.messages.create(**A)
    assert ctxkit.instrument.flush(20)
    # A branch with a control character is one the schema refuses: left out, the call still recorded.
    assert runs(live_server, key) == {"place-run": ("/home/dev/src/refunds", ""), "bare-run": ("", "")}
