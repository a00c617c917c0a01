"""Hourly and daily rollups: equal to the raw aggregate, and never double-counted.

The analysis marks buckets dirty and the refresh recomputes them (every interval with
Redis, right after each analysis without): the tests about the rollups' content flush the
dirty buckets explicitly (``flush_rollups``); the ones about the refresh set an interval,
on both databases."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ctxkit.manifest import Compaction, Evidence, Invariant, Usage
from manifests import analysis
from manifests.analysis import rollups
from manifests.models import Call, Rollup, RollupMark
from manifests.selectors import series
from manifests.selectors.filters import Filters
from tests.analysis import figures_reference as reference
from tests.analysis.support import SYSTEM, TOOLS, flush_rollups, item, prefix
from tests.support import T0, manifest, store, store_and_analyse

pytestmark = pytest.mark.django_db

FIELDS = [f.name for f in Rollup._meta.fields if f.name not in {"id", "computed_at"}]
BROKEN = Compaction(id="cmp", strategy="summary", tokens_before=3000, tokens_after=600,
                    invariants=[Invariant(name="user_constraints", ok=False, lost=["test env only"]),
                                Invariant(name="required_evidence", ok=False, lost=["429"])])


def snapshot():
    return sorted(tuple(r[f] for f in FIELDS) for r in Rollup.objects.values(*FIELDS))


def varied(n: int, *, agent: str = "analyst", hours: float = 0):
    """The n-th call of a varied workload: hits and misses, kept and dropped evidence."""
    verified = ("yes", "no", "unknown")[n % 3]
    items = [
        item("system", kind="system", tokens=300),
        item("tools", kind="tools", tokens=500),
        item("log", kind="tool_result", action="truncate" if n % 2 else "keep", tokens=200 + n, trust="untrusted"),
        item("page", kind="retrieval", action="drop" if n % 3 == 0 else "keep", tokens=150),
    ]
    evidence = [
        Evidence(key="rate", expected_item="log", present=n % 2 == 0, found_in="log" if n % 2 == 0 else None),
        Evidence(key="policy", expected_item="page", present=n % 3 != 0, found_in=None if n % 3 == 0 else "page"),
    ]
    return manifest(
        f"{agent}-{n}", bare=True, run_id=f"{agent}-run-{n // 4}", step=n % 4,
        started_at=T0 + timedelta(hours=hours, minutes=n),
        agent=agent, items=items, evidence=evidence, compactions=[BROKEN] if n % 5 == 0 else [],
        prefix=prefix(system=(SYSTEM[0] + str(n % 2), 600), tools=TOOLS),
        usage=Usage(input_tokens=2000 + n, cache_read_tokens=(1200 if n % 4 else 0), output_tokens=100 + n),
        outcome={"verified": verified},
    )


def workload():
    out = [varied(n, hours=h) for n, h in zip(range(40), [0, 0.5, 1.2, 5, 23.5, 24.2, 30, 47] * 5)]
    out += [varied(n, agent="writer", hours=2) for n in range(10)]
    return out


def test_it_sums_one_hour_from_the_source_rows(project):
    calls = store_and_analyse(project, [varied(n) for n in range(6)])
    flush_rollups()
    hour = Rollup.objects.get(project=project, bucket="hour")
    assert hour.start == T0 and (hour.agent, hour.model) == ("analyst", calls[0].model)
    assert hour.calls == 6 and hour.items == 24
    assert hour.input_tokens == sum(2000 + n for n in range(6))
    assert hour.cache_read_tokens == 1200 * 4  # calls 1, 2, 3 and 5
    assert hour.output_tokens == sum(100 + n for n in range(6))
    assert hour.uncached_input_tokens == hour.input_tokens - hour.cache_read_tokens
    assert hour.cost == pytest.approx(sum(c.figures.cost for c in calls))
    assert hour.verified_successes == 2  # calls 0 and 3
    assert (hour.evidence_total, hour.evidence_present) == (12, 3 + 4)
    assert (hour.compactions, hour.invariant_failures) == (2, 4)  # calls 0 and 5, two failed checks each
    assert hour.attributions == {"budget": 2, "truncated": 3}
    assert hour.tokens_by_kind == {"system": 1800, "tools": 3000, "tool_result": sum(200 + n for n in range(6)),
                                   "retrieval": 150 * 4}
    # The system prompt alternates between two versions: every later call of a run changed prefix,
    # and so did the second run's first call against the first run's last call.
    assert hour.cache_causes == {"cold_start": 1, "prefix_changed": 5} and hour.prefix_changes == 5
    assert hour.hit_rate == pytest.approx(hour.cache_read_tokens / hour.input_tokens)
    assert hour.cost_per_verified_success == pytest.approx(hour.cost / 2)
    day = Rollup.objects.get(project=project, bucket="day")
    assert day.start == T0.replace(hour=0) and [getattr(day, f) for f in rollups.SUM_FIELDS] == [
        getattr(hour, f) for f in rollups.SUM_FIELDS]


@pytest.mark.parametrize("bucket", ["hour", "day"])
def test_it_matches_the_reference_computed_from_the_manifests(project, bucket):
    store_and_analyse(project, workload())
    flush_rollups()
    assert Rollup.objects.filter(project=project, bucket=bucket).count() >= (3 if bucket == "day" else 8)
    reference.assert_rollups_match(project, bucket)
    writer = series.totals(project, Filters(since=T0 - timedelta(days=1), until=T0 + timedelta(days=3),
                                            agent="writer"))
    assert writer["calls"] == 10


def test_it_never_double_counts_when_calls_are_analysed_again(project):
    calls = store_and_analyse(project, workload())
    flush_rollups()
    before = snapshot()
    pks = [c.pk for c in calls]
    assert analysis.analyze_calls(pks) == 0  # a redelivered task: nothing to do
    assert analysis.analyze_calls(pks, force=True) == len(pks)  # re-analysis recomputes, never adds
    assert analysis.analyze_calls(pks[:7], force=True) == 7
    flush_rollups()
    assert snapshot() == before


def test_it_recomputes_a_bucket_when_more_calls_arrive(project):
    store_and_analyse(project, [varied(n) for n in range(3)])
    flush_rollups()
    assert Rollup.objects.get(bucket="hour").calls == 3
    store_and_analyse(project, [varied(n) for n in range(3, 6)])
    flush_rollups()
    assert Rollup.objects.filter(bucket="hour").count() == 1
    assert Rollup.objects.get(bucket="hour").calls == 6


def test_it_counts_only_analysed_calls(project):
    store(project, [varied(0)])
    store_and_analyse(project, [varied(1)])
    flush_rollups()
    assert Rollup.objects.get(bucket="hour").calls == 1


def test_it_rebuilds_rollups_identically_from_the_source(project):
    store_and_analyse(project, workload())
    flush_rollups()
    before = snapshot()
    Rollup.objects.all().delete()
    written = rollups.rebuild(project_id=project.pk, start=T0 - timedelta(days=1), end=T0 + timedelta(days=3))
    assert written == len(before)
    assert snapshot() == before


def test_it_updates_the_bucket_of_a_successor_whose_cause_changed(project):
    late_hour = T0 + timedelta(hours=3)
    first = manifest("s0", run_id="r", step=0)
    third = manifest("s2", run_id="r", step=2, started_at=late_hour.isoformat())
    store_and_analyse(project, [first, third])
    flush_rollups()
    assert Rollup.objects.get(bucket="hour", start=late_hour).cache_causes == {"hit": 1}
    changed = manifest("s1", run_id="r", step=1, prefix={"hash": "f" * 64, "tokens": 2000})
    changed["usage"] = {"input_tokens": 3000, "cache_write_tokens": 2000}
    store_and_analyse(project, [changed])
    flush_rollups()
    # s2 now follows s1, whose prefix differs: its own hour (not s1's) says so.
    assert Rollup.objects.get(bucket="hour", start=late_hour).prefix_changes == 1


def health() -> dict:
    from django.test import Client

    return Client().get("/healthz").json()


@pytest.fixture
def interval(settings):
    """An interval, as with Redis and a beat (the SQLite runs default to 0)."""
    settings.CTXVIEW_ROLLUP_INTERVAL_SECONDS = 5
    return 5


def test_it_refreshes_a_bucket_once_however_many_batches_marked_it(project, interval):
    for batch in range(6):
        store_and_analyse(project, [varied(n) for n in range(batch * 3, batch * 3 + 3)])
    # Six analysed batches, one hour: marked six times, computed not once yet.
    assert not Rollup.objects.exists()
    assert RollupMark.objects.count() == 6
    assert rollups.dirty() == {(project.pk, T0, "analyst", Call.objects.first().model)}
    assert health()["oldest_rollup_mark_seconds"] is not None
    assert rollups.refresh() == 1  # one recompute of the hour (and its day) for the interval
    assert rollups.refresh() == 0 and not RollupMark.objects.exists()
    assert health()["oldest_rollup_mark_seconds"] is None
    assert Rollup.objects.get(bucket="hour").calls == 18
    for bucket in ("hour", "day"):
        reference.assert_rollups_match(project, bucket)


def test_it_refreshes_right_after_the_analysis_with_the_interval_zero(project, settings):
    settings.CTXVIEW_ROLLUP_INTERVAL_SECONDS = 0  # the embedded default: no beat
    store_and_analyse(project, workload())
    assert not RollupMark.objects.exists()
    for bucket in ("hour", "day"):
        reference.assert_rollups_match(project, bucket)


def test_it_keeps_a_mark_made_while_a_refresh_runs(project, interval, monkeypatch):
    store_and_analyse(project, [varied(n) for n in range(3)])
    recompute = rollups.recompute
    late: list = []

    def recompute_then_analyse_more(keys):
        done = recompute(keys)
        if not late:  # a batch of the same hour analysed after the bucket was computed
            late.extend(store_and_analyse(project, [varied(n) for n in range(3, 5)]))
        return done

    monkeypatch.setattr(rollups, "recompute", recompute_then_analyse_more)
    assert rollups.refresh() == 1
    monkeypatch.undo()
    # The late batch is not in the bucket, and its mark survived the refresh that ran meanwhile.
    assert len(late) == 2 and Rollup.objects.get(bucket="hour").calls == 3
    assert RollupMark.objects.count() == 1
    assert rollups.refresh() == 1
    assert Rollup.objects.get(bucket="hour").calls == 5
    reference.assert_rollups_match(project, "hour")


def test_it_leaves_rollups_alone_when_nothing_is_dirty(project, interval):
    store_and_analyse(project, [varied(n) for n in range(3)])
    flush_rollups()
    stamp = Rollup.objects.get(bucket="hour").computed_at
    assert rollups.refresh() == 0
    assert Rollup.objects.get(bucket="hour").computed_at == stamp


def test_it_says_on_the_overview_that_the_trend_lags_until_the_refresh(project, owner, interval):
    from django.test import Client

    store_and_analyse(project, [varied(n) for n in range(3)])
    client = Client()
    client.force_login(owner)
    url = f"/p/{project.slug}/?range=all"
    assert 'id="rollup-lag"' in client.get(url).content.decode()
    assert 'id="rollup-lag"' in client.get(f"/p/{project.slug}/cache/?range=all").content.decode()
    flush_rollups()
    assert 'id="rollup-lag"' not in client.get(url).content.decode()


@pytest.mark.django_db(transaction=True)
def test_it_refreshes_on_two_connections_at_once_without_double_counting(project, interval):
    import threading

    from django.db import connection

    for batch in range(8):  # eight hours over two days, each marked twice
        hours = [0, 1, 2, 3, 24, 25, 26, 27][batch]
        store_and_analyse(project, [varied(n, hours=hours) for n in range(batch * 2, batch * 2 + 2)])
        store_and_analyse(project, [varied(n, hours=hours) for n in range(batch * 2 + 16, batch * 2 + 18)])
    assert len(rollups.dirty()) == 8 and RollupMark.objects.count() == 16
    barrier = threading.Barrier(2)
    counts: list[int] = []
    errors: list[BaseException] = []

    def refresh() -> None:
        try:
            barrier.wait(timeout=30)
            counts.append(rollups.refresh(batch=2))  # small groups: the two runs interleave
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=refresh) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # Every dirty hour recomputed (twice at most: when the two runs' claims split one hour's two
    # marks between them, both recompute it, one after the other), and the figures exact.
    assert 8 <= sum(counts) <= 16 and not RollupMark.objects.exists()
    for bucket in ("hour", "day"):
        reference.assert_rollups_match(project, bucket)
