"""Retention and project deletion (manifests/storage/retention.py), on both databases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import models

from manifests import tasks
from manifests.models import ApiKey, CacheEvent, Call, Compaction, Invariant, Item, Project, Rollup, Run
from manifests.storage import retention
from tests.analysis.support import flush_rollups
from tests.support import T0, manifest, store_and_analyse

pytestmark = pytest.mark.django_db

OLD = T0
RECENT = T0 + timedelta(days=40)
NOW = T0 + timedelta(days=45)


def at(moment, call_id: str, *, run_id: str, step: int = 0) -> dict:
    m = manifest(call_id, run_id=run_id, step=step, items=6)
    m["started_at"] = (moment + timedelta(seconds=step)).isoformat()
    return m


def project_rows(project: Project) -> dict[str, int]:
    """Rows of every model that belongs to the project, directly or through a call."""
    counts: dict[str, int] = {}
    for model in apps.get_app_config("manifests").get_models():
        names = {f.name for f in model._meta.get_fields() if isinstance(f, models.ForeignKey | models.OneToOneField)}
        if model is Project:
            counts["Project"] = Project.objects.filter(pk=project.pk).count()
        elif "project" in names:
            counts[model.__name__] = model.objects.filter(project=project).count()
        elif "call" in names:
            counts[model.__name__] = model.objects.filter(call__project=project).count()
    counts["Invariant"] = Invariant.objects.filter(compaction__project=project).count()
    return counts


@pytest.fixture
def aged(project):
    """Two runs: one entirely 45 days old, one 5 days old that also has an old first step."""
    store_and_analyse(project, [at(OLD, f"old-{n}", run_id="old-run", step=n) for n in range(3)])
    store_and_analyse(project, [at(OLD, "mixed-0", run_id="mixed", step=0)])
    store_and_analyse(project, [at(RECENT, f"mixed-{n}", run_id="mixed", step=n) for n in range(1, 4)])
    flush_rollups()  # the trend the retention tests watch
    return project


def test_it_expires_calls_older_than_the_retention_period(aged):
    recent_raw = {c.call_id: c.raw for c in Call.objects.filter(project=aged, started_at__gte=RECENT)}

    expired = retention.expire_project(project=aged, now=NOW)

    assert expired["calls"] == 4
    assert sorted(Call.objects.filter(project=aged).values_list("call_id", flat=True)) == [
        "mixed-1", "mixed-2", "mixed-3"
    ]
    # What hung off the expired calls went with them; the recent calls read back unchanged.
    assert Item.objects.filter(project=aged).count() == 3 * 6
    assert Compaction.objects.filter(project=aged).count() == 3
    assert {c.call_id: c.raw for c in Call.objects.filter(project=aged)} == recent_raw
    # The run with no call left is gone; the run with recent calls stays.
    assert list(Run.objects.filter(project=aged).values_list("run_id", flat=True)) == ["mixed"]


def test_it_keeps_the_rollups_so_the_trend_outlives_the_raw_rows(aged):
    old_hours = set(Rollup.objects.filter(project=aged, start__lt=RECENT).values_list("start", "bucket", "calls"))
    assert old_hours

    retention.expire_project(project=aged, now=NOW)

    assert set(Rollup.objects.filter(project=aged, start__lt=RECENT).values_list("start", "bucket", "calls")) == (
        old_hours
    )


def test_it_expires_rollups_after_their_own_period(aged, settings):
    settings.CTXVIEW_ROLLUP_RETENTION_DAYS = 42

    expired = retention.expire_project(project=aged, now=NOW)

    assert expired["rollups"] > 0
    assert not Rollup.objects.filter(project=aged, start__lt=NOW - timedelta(days=42)).exists()
    assert Rollup.objects.filter(project=aged, start__gte=RECENT - timedelta(days=1)).exists()


def test_it_never_expires_rollups_before_the_raw_rows(aged, settings):
    settings.CTXVIEW_ROLLUP_RETENTION_DAYS = 1
    aged.retention_days = 60
    aged.save()

    assert retention.rollup_retention_days(aged) == 60
    assert retention.expire_project(project=aged, now=NOW) == {"calls": 0, "runs": 0, "prefixes": 0, "rollups": 0}


def test_it_uses_the_projects_own_retention_period(aged):
    aged.retention_days = 50
    aged.save()

    assert retention.expire_project(project=aged, now=NOW)["calls"] == 0
    assert Call.objects.filter(project=aged).count() == 7


def test_it_clears_pointers_from_kept_calls_to_expired_ones(aged):
    kept = Call.objects.get(project=aged, call_id="mixed-1")
    expired_call = Call.objects.get(project=aged, call_id="mixed-0")
    CacheEvent.objects.filter(call=kept).update(previous_call=expired_call)

    retention.expire_project(project=aged, now=NOW)

    assert CacheEvent.objects.get(call=kept).previous_call is None


def test_it_deletes_a_project_and_leaves_nothing_behind(aged, other_project):
    store_and_analyse(other_project, [at(RECENT, "other-0", run_id="other")])
    before_other = project_rows(other_project)
    assert project_rows(aged)["Item"] > 0

    retention.delete_project(project=aged)

    assert set(project_rows(aged).values()) == {0}
    assert project_rows(other_project) == before_other
    assert ApiKey.objects.filter(project=other_project).count() == before_other["ApiKey"]


def test_the_daily_task_applies_every_projects_retention(aged, other_project, settings):
    settings.CTXVIEW_RETENTION_DAYS = 1  # OLD is days before the real clock; RECENT after it
    store_and_analyse(other_project, [at(OLD, "other-0", run_id="other"), at(RECENT, "other-1", run_id="other")])

    tasks.enforce_retention.apply().get()  # the task body, run here

    assert set(Call.objects.filter(project__in=[aged, other_project]).values_list("call_id", flat=True)) == {
        "mixed-1", "mixed-2", "mixed-3", "other-1"
    }


def test_the_commands_expire_and_delete(aged, capsys, settings):
    settings.CTXVIEW_RETENTION_DAYS = 1
    call_command("enforce_retention", project=aged.slug)
    assert "4 calls" in capsys.readouterr().out

    call_command("delete_project", aged.slug, yes=True)
    assert not Project.objects.filter(pk=aged.pk).exists()


def test_every_relation_it_deletes_through_has_a_rule():
    """The set-based delete handles CASCADE and SET_NULL; any other rule is refused at run time."""
    for model in apps.get_app_config("manifests").get_models():
        for rel in model._meta.get_fields(include_hidden=True):
            if rel.auto_created and not rel.concrete and rel.is_relation and rel.related_model is not None:
                if rel.related_model._meta.app_label == "manifests":
                    copy = (rel.related_model.__name__, rel.field.name) in retention.RUN_COPIES
                    assert rel.on_delete in ((models.DO_NOTHING,) if copy else (models.CASCADE, models.SET_NULL)), \
                        (model.__name__, rel.name)
