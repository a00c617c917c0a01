"""``ctxkit check-prefix`` against a live ctxview holding the demo (loaded by the path
``manage.py seed_demo`` takes): the researcher's runs before and after the release that put the
current time into its system prompt (manifests/demo/runs.py, ``RELEASE``)."""

from __future__ import annotations

import re

import pytest

from ctxkit.cli import main
from manifests.demo import runs as demo
from manifests.models import Call, ModelPrice

pytestmark = pytest.mark.django_db

RESEARCH_RUN = re.compile(r"^research-\d+$")


def research_runs_around_the_release(project) -> tuple[list[str], list[str]]:
    """The researcher's numbered runs whose calls all started before the release, and after it."""
    calls = list(Call.objects.filter(project=project, run__run_id__regex=RESEARCH_RUN.pattern)
                 .values_list("run__run_id", "started_at").order_by("started_at"))
    # The demo starts on a whole hour, and the researcher's first call comes minutes after it.
    release = calls[0][1].replace(minute=0, second=0, microsecond=0) + demo.RELEASE
    before, after = {}, {}
    for run_id, started in calls:
        (before if started < release else after).setdefault(run_id, []).append(started)
    straddling = set(before) & set(after)
    return ([r for r in before if r not in straddling], [r for r in after if r not in straddling])


def test_check_prefix_on_the_demo_names_the_timestamp_line_and_its_cost_and_passes_before_it(
        live_server, demo_world, capsys):
    # The server's price book prices the model: the command reads it from the call's JSON.
    ModelPrice.objects.create(model_pattern="claude-sonnet-*", input_per_1k=3, cache_read_per_1k=0.3,
                              cache_write_per_1k=3.75, output_per_1k=15)
    before, after = research_runs_around_the_release(demo_world.project)
    assert len(before) >= 2 and after
    remote = ["--host", live_server.url, "--key", demo_world.key]

    assert main(["check-prefix", before[-1], after[0], *remote]) == 1
    out = capsys.readouterr().out
    system_lines = demo.RESEARCH_SYSTEM.count("\n") + 1
    changed = re.search(rf"PREFIX CHANGED at step 0 \({before[-1]}/step-0 -> {after[0]}/step-0\): "
                        rf"segment 'system', line {system_lines + 1}: added 'Current time: (\S+ \S+) UTC\.'", out)
    assert changed, out
    first = Call.objects.get(project=demo_world.project, call_id=f"{after[0]}/step-0")
    assert changed.group(1) == first.started_at.strftime("%Y-%m-%d %H:%M:%S")
    assert "8 of 8 steps differ" in out and "+Current time: " in out
    # Every call after the release changes its prefix (system is its first segment): the whole
    # prefix is written, not read, at every call, at claude-sonnet-*'s (3.75 - 0.3) per 1k tokens.
    assert f"cache lost from segment 'system' on: {first.prefix_tokens} tokens a call" in out
    assert (f"estimated extra cost: {first.prefix_tokens * 3.45:,.2f} per 1,000 calls" in out
            and "the server's price book" in out), out

    assert main(["check-prefix", before[0], before[1], *remote]) == 0
    assert "prefix unchanged" in capsys.readouterr().out
    assert main(["check-prefix", before[0], "no-such-run", *remote]) == 2
    assert "HTTP 404" in capsys.readouterr().err
