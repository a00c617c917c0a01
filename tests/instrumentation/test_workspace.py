"""``ctxkit.instrument(client, cwd=..., git_branch=...)``: where the agent works reaches its runs. The
real anthropic client talks to the local stand-in provider; the run is read back from a live server."""

from __future__ import annotations

import pytest

import ctxkit
from tests.instrumentation.test_clients import _get, anthropic_client
from tests.instrumentation.test_helpers import A


@pytest.mark.django_db(transaction=True)
def test_it_keeps_the_folder_and_branch_it_was_given_on_the_run(live_server, key, standin, sender):
    client = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, run_id="place-run",
                               cwd="/home/dev/src/refunds", git_branch="fix/\x1frounding")
    client.messages.create(**A)
    bare = ctxkit.instrument(anthropic_client(standin.url), ctxkit_client=sender, run_id="bare-run")
    bare.messages.create(**A)
    assert ctxkit.instrument.flush(20)
    runs = {r["run_id"]: (r["cwd"], r["git_branch"]) for r in _get(live_server, key, "/api/v1/runs")["results"]}
    # A branch with a control character is one the schema refuses: left out, the call still recorded.
    assert runs == {"place-run": ("/home/dev/src/refunds", ""), "bare-run": ("", "")}
