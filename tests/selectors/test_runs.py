"""The run view's per-step context: every item that reached the model counts."""

from __future__ import annotations

import pytest

from manifests.models import Run
from manifests.selectors.runs import run_steps
from tests.support import manifest

pytestmark = pytest.mark.django_db


def test_it_counts_kept_items_sent_without_a_position(api):
    m = manifest("bare", items=0, evidence=[], compactions=[], context_edits=[])
    m["items"] = [
        {"id": "system", "kind": "system", "action": "keep", "requested_tokens": 120},
        {"id": "old", "kind": "history", "action": "drop", "requested_tokens": 500},
        {"id": "log", "kind": "tool_result", "action": "truncate", "requested_tokens": 900, "granted_tokens": 300},
    ]
    assert api.post(m).json()["accepted"] == 1
    (step,) = run_steps(Run.objects.get(run_id="run-1"))
    assert step["tokens_by_kind"] == {"system": 120, "tool_result": 300}
    assert step["context_tokens"] == 420
