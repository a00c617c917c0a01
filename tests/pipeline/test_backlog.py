"""A backlog and a poison call, with a real Celery worker consuming from Redis.

Thousands of calls stranded while the broker was down are drained by one chain of
bounded sweep runs; a call whose analysis fails is quarantined without holding back its
siblings or the sweep, shown on its page and in the admin, and re-analysed by the
operator command once the cause is fixed.
"""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from manifests import analysis
from manifests.models import Call, CallFigures, ModelPrice, Rollup
from tests.analysis.support import flush_rollups, free_port
from tests.pipeline.support import REDIS_URL, broker, redis_prefix, wait_for, workers  # noqa: F401 - fixtures
from tests.support import manifest

pytestmark = pytest.mark.django_db(transaction=True)


def health() -> dict:
    response = Client().get("/healthz")
    assert response.status_code == 200
    return response.json()


def sweep_runs(log: str) -> list[int]:
    return [int(n) for n in re.findall(r"sweep analysed (\d+) calls", log)]


def test_it_drains_thousands_of_stranded_calls_in_one_chain_of_bounded_sweeps(api, redis_prefix, workers):  # noqa: F811
    with broker(f"redis://127.0.0.1:{free_port()}/0", redis_prefix):  # the broker is down
        for b in range(30):
            body = {"manifests": [manifest(f"s{b}/{k}", run_id=f"run-{b}", step=k, items=2) for k in range(100)]}
            assert api.post(body).json()["accepted"] == 100
    assert health()["unanalysed_calls"] == 3000

    worker = workers(beat=True, CTXVIEW_SWEEP_INTERVAL="2", CTXVIEW_SWEEP_MIN_AGE="0", CTXVIEW_SWEEP_MAX_CALLS="1000")
    wait_for(lambda: not Call.objects.filter(analyzed_at__isnull=True).exists(), "the sweep to drain the backlog",
             workers=(worker,), timeout=600)
    # A sweep run logs its count after its last chunk commits, so the log can trail the table.
    wait_for(lambda: sum(sweep_runs(worker.text())) >= 3000, "the last sweep run to log its count",
             workers=(worker,))

    runs = sweep_runs(worker.text())
    # Bounded per run, every call analysed once, and a run that reached its bound went on at
    # once instead of waiting for the next beat.
    assert max(runs) <= 1000 and sum(runs) == 3000, runs
    assert "continuing at once" in worker.text()
    # The worker's beat refreshes the rollups of the whole backlog (every 5 s by default).
    wait_for(lambda: Rollup.objects.filter(bucket="day", calls=3000).exists(), "the beat to refresh the rollups",
             workers=(worker,))
    assert CallFigures.objects.count() == 3000
    assert health()["unanalysed_calls"] == 0


def test_it_quarantines_a_poison_call_and_analyses_its_siblings(api, project, owner, redis_prefix, workers):  # noqa: F811
    # A price row no form would accept (an infinite effective-limit ratio, written by a data
    # migration gone wrong) makes the analysis of this model's calls raise.
    price = ModelPrice.objects.create(model_pattern="broken-*", effective_limit_ratio=float("inf"))
    good = [manifest(f"good-{k}", run_id="run-a", step=k) for k in range(6)]
    poison = manifest("poison", run_id="run-a", step=3, model="broken-model")
    worker = workers()
    with broker(REDIS_URL, redis_prefix):
        assert api.post({"manifests": good[:3] + [poison] + good[3:]}).json()["accepted"] == 7
    wait_for(lambda: Call.objects.filter(quarantined_at__isnull=False).exists(), "the poison call to be quarantined",
             workers=(worker,))
    wait_for(lambda: Call.objects.filter(analyzed_at__isnull=False).count() == 6, "the siblings to be analysed",
             workers=(worker,))
    bad = Call.objects.get(call_id="poison")
    assert bad.analyzed_at is None and bad.analysis_error.startswith("OverflowError")
    flush_rollups()
    assert Rollup.objects.get(bucket="hour", model="claude-sonnet-4-5").calls == 6
    assert "retrying them one by one" in worker.text()

    # The sweep moves past it: calls stranded later are analysed, the poison is not retried.
    with broker(f"redis://127.0.0.1:{free_port()}/0", redis_prefix):
        assert api.post({"manifests": [manifest(f"late-{k}", run_id="run-b", step=k) for k in range(3)]}
                        ).json()["accepted"] == 3
    result = analysis.sweep_unanalysed(older_than_seconds=0)
    assert (result.analysed, result.quarantined, result.remaining) == (3, 0, 0)
    assert health()["quarantined_calls"] == 1 and health()["unanalysed_calls"] == 0

    # Its error is visible: a badge on its page, and the admin's quarantine filter.
    client = Client()
    client.force_login(owner)
    page = client.get(f"/p/{project.slug}/calls/poison/").content.decode()
    assert 'id="quarantined"' in page and "OverflowError" in page
    assert 'id="quarantined"' not in client.get(f"/p/{project.slug}/calls/good-0/").content.decode()
    admin = get_user_model().objects.create_superuser("root", password="password-root")
    client.force_login(admin)
    listing = client.get("/admin/manifests/call/", {"analysis": "quarantined"}).content.decode()
    assert "poison" in listing and "good-0" not in listing

    # After the fix, the operator command analyses it.
    price.effective_limit_ratio = 0.5
    price.save()
    out = StringIO()
    call_command("reanalyse_calls", "--quarantined", stdout=out)
    assert "re-analysed 1 of 1 quarantined calls; 0 still quarantined" in out.getvalue()
    bad.refresh_from_db()
    assert bad.analyzed_at is not None and bad.quarantined_at is None and bad.analysis_error == ""
    assert health()["quarantined_calls"] == 0


def test_it_keeps_a_call_quarantined_when_it_still_fails(api, project):
    ModelPrice.objects.create(model_pattern="broken-*", effective_limit_ratio=float("inf"))
    api.post({"manifests": [manifest("poison", model="broken-model"), manifest("fine", step=1)]})
    analysis.sweep_unanalysed(older_than_seconds=0)  # without a worker (CI's PostgreSQL run): the sweep
    assert Call.objects.get(call_id="fine").analyzed_at is not None
    assert Call.objects.get(call_id="poison").quarantined_at is not None
    out = StringIO()
    call_command("reanalyse_calls", "--quarantined", stdout=out)
    assert "re-analysed 0 of 1 quarantined calls; 1 still quarantined" in out.getvalue()
    assert "poison: OverflowError" in out.getvalue()
