"""The pipeline with the real thing: a Celery worker process consuming from Redis.

Ingest a batch and see it analysed; Redis unreachable during ingest and the sweep
analysing the stored calls later; a worker killed in the middle of a task and the
task redelivered, with nothing counted twice; a failing webhook retried.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from django.db import connection

from ctxkit.manifest import Compaction, Evidence, Invariant, Usage
from manifests.analysis import notify
from manifests.models import Attribution, Call, CallFigures, PrefixEntry, Regression, Rollup
from tests.analysis import figures_reference as reference
from tests.analysis.support import STABLE, SYSTEM, TOOLS, flush_rollups, free_port, item, prefix
from tests.pipeline.support import REDIS_URL, broker, redis_prefix, wait_for, workers  # noqa: F401 - fixtures
from tests.support import Receiver, manifest

pytestmark = pytest.mark.django_db(transaction=True)


def batch(n: int, *, run: str = "run-1", prefix_hash: str = "a" * 64) -> dict:
    manifests = [manifest(f"{run}/{k}", run_id=run, step=k, items=6) for k in range(n)]
    for m in manifests:
        m["prefix"]["hash"] = prefix_hash
    return {"manifests": manifests}


def held(marker, *, chunk: int, seconds: float) -> dict[str, str]:
    """A worker whose chunk number ``chunk`` stops inside its open transaction, after its writes,
    writes ``marker`` and sleeps ``seconds`` (tests/pipeline/held_analysis.py)."""
    return {"app": "tests.pipeline.held_analysis", "CTXVIEW_TEST_HOLD_FILE": str(marker),
            "CTXVIEW_TEST_HOLD_CHUNK": str(chunk), "CTXVIEW_TEST_HOLD_SECONDS": str(seconds)}


def analysed(count: int):
    return lambda: Call.objects.filter(analyzed_at__isnull=False).count() == count


def received(worker, task: str) -> list[str]:
    return re.findall(rf"Task {re.escape(task)}\[([0-9a-f-]+)\] received", worker.text())


def test_it_analyses_an_ingested_batch_in_a_worker(api, redis_prefix, workers):  # noqa: F811
    worker = workers()
    with broker(REDIS_URL, redis_prefix):
        response = api.post(batch(3))
    assert response.status_code == 200 and response.json()["accepted"] == 3
    wait_for(analysed(3), "the batch to be analysed", workers=(worker,))
    assert CallFigures.objects.count() == 3
    flush_rollups()
    assert Rollup.objects.get(bucket="hour").calls == 3
    # One task for the batch, never one per manifest.
    wait_for(lambda: "succeeded" in worker.text(), "the task to finish", workers=(worker,))
    assert len(received(worker, "manifests.tasks.analyze_calls")) == 1


def test_it_keeps_rollups_exact_when_two_processes_analyse_the_same_hour(api, redis_prefix, workers):  # noqa: F811
    with broker(REDIS_URL, redis_prefix):
        # Batches in the same hour, queued first, then taken by two processes at once; nothing
        # else they write is shared (runs and prefixes differ): only the rollup's lock orders them.
        for n in range(16):
            assert api.post(batch(4, run=f"run-{n}", prefix_hash=f"{n:064x}")).status_code == 200
    worker = workers(pool="prefork", concurrency=2)
    wait_for(analysed(64), "the batches to be analysed", workers=(worker,))
    project = Call.objects.first().project
    # Refreshed here, after both processes marked the hour: the marks are the subject (none lost).
    flush_rollups()
    for bucket in ("hour", "day"):
        reference.assert_rollups_match(project, bucket)
    assert Rollup.objects.get(bucket="hour").calls == 64


def test_it_stores_while_redis_is_down_and_the_sweep_analyses_later(api, redis_prefix, workers):  # noqa: F811
    with broker(f"redis://127.0.0.1:{free_port()}/0", redis_prefix):
        response = api.post(batch(4))
    assert response.status_code == 200 and response.json()["accepted"] == 4
    assert Call.objects.count() == 4 and not Call.objects.filter(analyzed_at__isnull=False).exists()
    # Redis is back; nothing was queued, so only the beat sweep can find these calls.
    worker = workers(beat=True, CTXVIEW_SWEEP_INTERVAL="1", CTXVIEW_SWEEP_MIN_AGE="0",
                     CTXVIEW_ROLLUP_INTERVAL_SECONDS="1")
    wait_for(analysed(4), "the sweep to analyse the stored calls", workers=(worker,))
    assert received(worker, "manifests.tasks.sweep_unanalysed")
    assert not received(worker, "manifests.tasks.analyze_calls")
    # The beat's rollup refresh brings the analysed calls into the rollups.
    wait_for(lambda: Rollup.objects.filter(bucket="day", calls=4).exists(), "the beat to refresh the rollups",
             workers=(worker,))
    assert received(worker, "manifests.tasks.refresh_rollups")


def test_it_redelivers_the_task_of_a_killed_worker_without_double_counting(
    api, redis_prefix, workers, tmp_path  # noqa: F811
):
    marker = tmp_path / "paused"
    # Chunks of 2 calls: the first chunk commits, the worker dies inside the second. A prefork
    # worker, whose parent would acknowledge the message at once if the task did not ack late.
    slow = workers(pool="prefork", CELERY_VISIBILITY_TIMEOUT="2", CTXVIEW_ANALYSIS_CHUNK="2",
                   **held(marker, chunk=1, seconds=300))
    with broker(REDIS_URL, redis_prefix):
        assert api.post(batch(4)).status_code == 200
    wait_for(marker.exists, "the worker to pause inside the second chunk", workers=(slow,))
    assert Call.objects.filter(analyzed_at__isnull=False).count() == 2
    (task_id,) = received(slow, "manifests.tasks.analyze_calls")

    slow.kill()
    # Refreshed after the kill (SQLite has one writer, and the paused chunk held it): the first
    # chunk's mark committed with its calls, the killed chunk's rolled back with its own.
    flush_rollups()
    assert Rollup.objects.get(bucket="hour").calls == 2
    time.sleep(2.5)  # let the unacknowledged message outlive the (test) visibility timeout
    fresh = workers(CELERY_VISIBILITY_TIMEOUT="2", CTXVIEW_ANALYSIS_CHUNK="2")
    wait_for(analysed(4), "the redelivered task to finish the batch", workers=(fresh,))
    assert received(fresh, "manifests.tasks.analyze_calls") == [task_id]  # the same task, delivered again

    # Exactly four calls everywhere: the first chunk was not counted a second time.
    flush_rollups()
    assert Rollup.objects.get(bucket="hour").calls == 4 and Rollup.objects.get(bucket="day").calls == 4
    assert CallFigures.objects.count() == 4
    assert Attribution.objects.filter(is_risk=False).count() == 4  # one missing evidence per call
    assert PrefixEntry.objects.get().calls == 4
    reference.assert_rollups_match(Call.objects.first().project, "day")


def test_it_retries_a_failing_webhook_from_the_worker(api, project, redis_prefix, workers):  # noqa: F811
    receiver = Receiver(statuses=[503])
    try:
        project.webhook_url, project.webhook_secret = receiver.url, "hook-secret"
        project.regression_window_calls = 5
        project.save()
        stamped = prefix(system=(SYSTEM[0] + " 10:07", 612), tools=TOOLS)
        hit, miss = Usage(input_tokens=3000, cache_read_tokens=1500), Usage(input_tokens=3000, cache_write_tokens=1500)
        plan = [(hit, STABLE)] * 10 + [(miss, stamped)] * 5
        body = {"manifests": [manifest(f"c{n}", bare=True, run_id=f"r{n}", seconds=60 * n, usage=u, prefix=p,
                                               items=[item("q", kind="user")]) for n, (u, p) in enumerate(plan)]}
        worker = workers()
        with broker(REDIS_URL, redis_prefix):
            assert api.post(body).status_code == 200
        wait_for(lambda: Regression.objects.filter(notified_at__isnull=False).exists(),
                 "the webhook to be delivered after a retry", workers=(worker,))
        regression = Regression.objects.get()
        assert regression.notify_attempts == 2
        assert len(receiver.requests) == 2
        for headers, raw in receiver.requests:
            assert notify.verify("hook-secret", raw, headers["x-ctxview-signature"])
            assert json.loads(raw)["regression"]["id"] == regression.pk
        assert "Retry in" in worker.text()
    finally:
        receiver.close()


def test_it_finishes_a_killed_nodes_batch_on_the_other_node_exactly_once(
    api, redis_prefix, workers, tmp_path  # noqa: F811
):
    """Two worker nodes; one dies in the middle of a task. With the production visibility
    timeout (an hour) its task is not redelivered in time: the other node's sweep analyses
    what the dead one left, and nothing the dead one committed is counted again."""
    marker = tmp_path / "paused"
    doomed = workers(pool="prefork", CTXVIEW_ANALYSIS_CHUNK="2", **held(marker, chunk=1, seconds=300))
    with broker(REDIS_URL, redis_prefix):
        assert api.post(batch(4)).status_code == 200
    wait_for(marker.exists, "the first node to pause inside the second chunk", workers=(doomed,))
    other = workers(pool="prefork", concurrency=2, beat=True, CTXVIEW_SWEEP_INTERVAL="1", CTXVIEW_SWEEP_MIN_AGE="0")
    # Its sweep runs while the first node holds the second chunk's calls and must leave them:
    # PostgreSQL skips the locked rows; SQLite locks the whole file, so the sweep waits and retries.
    beside = "sweep analysed 0 calls" if connection.vendor == "postgresql" else "database is locked"
    wait_for(lambda: beside in other.text(), "a sweep beside the paused node", workers=(doomed, other))
    assert Call.objects.filter(analyzed_at__isnull=False).count() == 2

    doomed.kill()
    wait_for(analysed(4), "the other node's sweep to finish the batch", workers=(other,))
    assert not received(other, "manifests.tasks.analyze_calls")  # not redelivered: the sweep did it
    flush_rollups()
    assert Rollup.objects.get(bucket="hour").calls == 4 and Rollup.objects.get(bucket="day").calls == 4
    assert CallFigures.objects.count() == 4
    assert Attribution.objects.filter(is_risk=False).count() == 4
    assert PrefixEntry.objects.get().calls == 4
    reference.assert_rollups_match(Call.objects.first().project, "hour")


LOST = Compaction(id="cmp-1", strategy="model summary", tokens_before=5000, tokens_after=900, summary_item="summary",
                  invariants=[Invariant(name="user_constraints", ok=False, detail="lost the unit",
                                        lost=["divide by 100"])])


def step(n: int, *, present: bool, compactions: tuple = ()) -> dict:
    return manifest(f"c{n}", bare=True, step=n, seconds=10 * n, run_id="run-1", compactions=list(compactions),
                            items=[item("history", kind="history", zone="tail")],
                            evidence=[Evidence(key="unit", literal="divide by 100", expected_item="history",
                                               present=present, found_in="history" if present else None,
                                               used=True if present else None)])


def test_it_traces_a_step_analysed_on_one_node_while_an_earlier_one_arrives_on_another(
    api, redis_prefix, workers, tmp_path  # noqa: F811
):
    """A later step is being analysed on one node when the earlier steps of its run arrive
    and are analysed on another: the later step's cause must still be traced back to them."""
    marker = tmp_path / "paused"
    # PostgreSQL: the first node holds its chunk open long enough for the other node to finish
    # (unless it waits for it). SQLite serialises the writers: ingest waits for the pause, so short.
    pause = 30 if connection.vendor == "postgresql" else 2
    first = workers(**held(marker, chunk=0, seconds=pause))
    with broker(REDIS_URL, redis_prefix):
        assert api.post({"manifests": [step(2, present=False)]}).status_code == 200
        wait_for(marker.exists, "the first node to pause inside the analysis of step 2", workers=(first,))
        second = workers()
        wait_for(lambda: "ready." in second.text(), "the second node to start", workers=(first, second))
        assert api.post({"manifests": [step(0, present=True),
                                       step(1, present=False, compactions=(LOST,))]}).status_code == 200
    wait_for(analysed(3), "both nodes to finish", workers=(first, second))
    wait_for(lambda: first.text().count("succeeded") + second.text().count("succeeded") == 2,
             "both tasks to finish", workers=(first, second))
    calls = {c.step: c for c in Call.objects.all()}
    row = Attribution.objects.get(call=calls[2], evidence_key="unit")
    assert (row.cause, row.lost_at_id) == (Attribution.COMPACTION, calls[1].pk)
    flush_rollups()
    reference.assert_rollups_match(calls[2].project, "hour")
