"""The operator commands of docs/analysis.md: rebuild_rollups and reanalyse_calls."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ctxkit.manifest import Evidence, Usage
from manifests.models import Attribution, Call, CallFigures, Rollup
from tests.analysis.support import flush_rollups, item
from tests.support import T0, manifest, store_and_analyse

pytestmark = pytest.mark.django_db

FIELDS = [f.name for f in Rollup._meta.fields if f.name not in {"id", "computed_at"}]


def snapshot(**filters):
    return sorted(tuple(r[f] for f in FIELDS) for r in Rollup.objects.filter(**filters).values(*FIELDS))


def call_at(n: int, hours: float, agent: str = "analyst"):
    return manifest(
        f"{agent}-{n}", bare=True, run_id=f"run-{n}", started_at=T0 + timedelta(hours=hours), agent=agent,
        items=[item("log", kind="tool_result", action="drop" if n % 2 else "keep", tokens=100 + n)],
        evidence=[Evidence(key="rate", expected_item="log", present=n % 2 == 0, found_in=None if n % 2 else "log")],
        usage=Usage(input_tokens=1000 + n, cache_read_tokens=500, output_tokens=50),
    )


@pytest.fixture
def stored(project):
    # Day one (hours 0, 1, 5) and day two (hours 25, 30).
    calls = store_and_analyse(project, [call_at(n, h) for n, h in enumerate([0, 1, 5, 25, 30, 30.5])])
    flush_rollups()  # the rollups these commands rebuild
    return calls


def run(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_it_rebuilds_rollups_equal_to_the_analysis(project, stored):
    expected = snapshot()
    Rollup.objects.filter(project=project).update(calls=999, input_tokens=0)
    Rollup.objects.create(project=project, bucket="hour", start=T0 + timedelta(hours=3), agent="gone", model="m",
                          calls=7)  # a bucket whose calls are gone
    out = run("rebuild_rollups", "--project", project.slug)
    assert snapshot() == expected
    assert f"{project.slug}: " in out and "buckets recomputed" in out


def test_it_rebuilds_only_the_time_range(project, stored):
    expected = snapshot()
    Rollup.objects.filter(project=project).update(calls=999)
    since = T0 + timedelta(hours=24)  # day two: its hours and its day bucket
    run("rebuild_rollups", "--project", project.slug, "--since", since.isoformat(),
        "--until", (T0 + timedelta(days=2)).isoformat())
    day_two = since.replace(hour=0)
    assert snapshot(start__gte=day_two) == [r for r in expected if r[FIELDS.index("start")] >= day_two]
    assert set(Rollup.objects.filter(start__lt=day_two).values_list("calls", flat=True)) == {999}  # untouched


def test_it_reanalyses_only_the_selected_calls(project, stored):
    CallFigures.objects.filter(call__project=project).delete()
    Attribution.objects.filter(call__project=project).delete()
    out = run("reanalyse_calls", "--project", project.slug, "--since", "2026-11-29T00:00:00", "--until",
              (T0 + timedelta(hours=24)).isoformat())
    day_one = {c.call_id for c in stored if c.started_at < T0 + timedelta(hours=24)}
    assert set(CallFigures.objects.values_list("call__call_id", flat=True)) == day_one
    attributed = set(Attribution.objects.values_list("call__call_id", flat=True))
    assert "analyst-1" in attributed and attributed <= day_one  # analyst-1's evidence was dropped
    assert out.strip() == f"{len(day_one)} of {len(day_one)} calls analysed again"


def test_it_reanalyses_one_call_and_is_safe_to_run_twice(project, stored):
    before = CallFigures.objects.get(call__call_id="analyst-3")
    run("reanalyse_calls", "--project", project.slug, "--call", "analyst-3")
    run("reanalyse_calls", "--project", project.slug, "--call", "analyst-3")
    after = CallFigures.objects.get(call__call_id="analyst-3")
    assert after.pk != before.pk and CallFigures.objects.filter(call__call_id="analyst-3").count() == 1
    assert Call.objects.get(call_id="analyst-3").analyzed_at is not None


@pytest.mark.parametrize(("args", "message"), [
    (("rebuild_rollups", "--since", "yesterday"), "--since"),
    (("rebuild_rollups", "--project", "nope"), "--project"),
    (("rebuild_rollups", "--since", "2026-11-30", "--until", "2026-11-29"), "--until"),
    (("reanalyse_calls", "--call", "analyst-1"), "--call needs exactly one --project"),
    (("reanalyse_calls", "--project", "alpha", "--call", "no-such-call"), "no call 'no-such-call'"),
])
def test_it_refuses_bad_options_naming_the_option(project, stored, args, message):
    with pytest.raises(CommandError, match=message):
        call_command(*args, stdout=StringIO())
