"""Re-reads after loss: a tool call repeating one whose result the context lost in between."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from ctxkit.context.layout import canonical_json
from ctxkit.manifest import Compaction, ContextEdit, Item, Manifest, decode_manifest
from manifests.analysis.pipeline import analyze_calls
from manifests.models import ReRead
from tests.analysis.support import item, sha
from tests.support import manifest, store, store_and_analyse

pytestmark = pytest.mark.django_db

READ = canonical_json({"name": "Read", "input": {"file_path": "/repo/app.py"}})


def tool_pair(n: int, *, action: str = "keep", tokens: int = 400) -> list[Item]:
    """A Read of the same file (tool call id ``tu-n``) and its result."""
    return [item(f"call-{n}", kind="history", group=f"tu-{n}", content_hash=sha(READ)[:32], tokens=20),
            item(f"res-{n}", kind="tool_result", action=action, group=f"tu-{n}", label="Read", tokens=tokens)]


def run(*steps: list[Item], compaction_at: int | None = None, edit_at: int | None = None, run_id: str = "run-1",
        agent: str = "analyst", start: datetime | None = None, before: int = 5000, after: int = 800) -> list[Manifest]:
    """A run of the given steps' items (call ids ``c<step>``, prefixed by the run id when it is
    not the default), ten seconds apart from ``start`` (by default the analysis tests' T0)."""
    out = []
    for step, items in enumerate(steps):
        comps = [Compaction(id=f"cmp-{step}", strategy="summary", tokens_before=before, tokens_after=after)] \
            if step == compaction_at else []
        edits = [ContextEdit(type="clear_tool_uses_20250919", cleared_count=1, cleared_tokens=400)] \
            if step == edit_at else None
        call_id = f"c{step}" if run_id == "run-1" else f"{run_id}/c{step}"
        at = {"started_at": start + timedelta(seconds=10 * step)} if start is not None else {}
        out.append(manifest(call_id, bare=True, run_id=run_id, step=step, seconds=10 * step, items=items,
                            compactions=comps, context_edits=edits, agent=agent, **at))
    return out


def test_it_finds_a_reread_after_a_compaction(project):
    calls = store_and_analyse(project, run(tool_pair(1), tool_pair(1), [item("sum", kind="summary", tokens=50)],
                                           [item("sum", kind="summary", tokens=50), *tool_pair(2, tokens=410)],
                                           compaction_at=2))
    row = ReRead.objects.get()
    assert (row.call_id, row.step, row.tokens, row.tool) == (calls[3].pk, 3, 410, "Read")
    assert (row.earlier_call_id, row.earlier_item, row.lost_call_id) == (calls[1].pk, "res-1", calls[2].pk)
    assert (row.cause, row.cause_ref) == ("compaction", "cmp-2")


def test_it_finds_a_reread_after_a_context_edit_cleared_the_result(project):
    calls = store_and_analyse(project, run(tool_pair(1), tool_pair(1, action="clear"),
                                           [*tool_pair(1, action="clear"), *tool_pair(2)], edit_at=1))
    row = ReRead.objects.get()
    assert (row.call_id, row.lost_call_id, row.cause) == (calls[2].pk, calls[1].pk, "context_edit")
    assert row.cause_ref == "clear_tool_uses_20250919"


def test_it_finds_a_reread_after_a_truncation(project):
    calls = store_and_analyse(project, run(tool_pair(1), tool_pair(1, action="truncate"),
                                           [*tool_pair(1, action="truncate"), *tool_pair(2)]))
    row = ReRead.objects.get()
    assert (row.call_id, row.lost_call_id, row.cause, row.tokens) == (calls[2].pk, calls[1].pk, "truncate", 400)


def test_it_does_not_count_a_repeat_whose_result_was_still_held(project):
    store_and_analyse(project, run(tool_pair(1), [*tool_pair(1), *tool_pair(2)]))
    assert not ReRead.objects.exists()


def test_it_does_not_duplicate_rereads_when_reanalysed(project):
    calls = store_and_analyse(project, run(tool_pair(1), [], [*tool_pair(2)]))
    assert ReRead.objects.get().cause == "drop"
    analyze_calls([c.pk for c in calls], force=True)
    assert ReRead.objects.count() == 1


def test_it_shows_the_reread_and_the_compaction_cost_on_the_call_pages(project, member):
    from django.test import Client

    from tests.html_page import parse

    calls = store_and_analyse(project, run(tool_pair(1), tool_pair(1), [item("sum", kind="summary", tokens=50)],
                                           [item("sum", kind="summary", tokens=50), *tool_pair(2, tokens=410)],
                                           compaction_at=2))
    client = Client()
    client.force_login(member)
    reader = parse(client.get(f"/p/{project.slug}/calls/{calls[3].call_id}/").content.decode())
    line = reader.one('li[data-reread="res-2"]').text
    assert "res-1" in line and "step 1" in line and "step 2" in line and "compaction cmp-2" in line
    lost = parse(client.get(f"/p/{project.slug}/calls/{calls[2].call_id}/").content.decode())
    assert lost.one("[data-reread-cost]").text.strip() == "cost 410 re-read tokens in 1 call"


def test_it_keeps_a_reread_whose_earlier_calls_expired(project, member):
    from datetime import timedelta

    from django.test import Client

    from manifests.storage import retention
    from tests.html_page import parse

    calls = store_and_analyse(project, run(tool_pair(1), tool_pair(1), [item("sum", kind="summary", tokens=50)],
                                           [item("sum", kind="summary", tokens=50), *tool_pair(2, tokens=410)],
                                           compaction_at=2))
    calls[3].refresh_from_db()
    now = calls[3].started_at + timedelta(days=retention.retention_days(project))
    assert retention.expire_project(project=project, now=now)["calls"] == 3
    row = ReRead.objects.get()
    assert (row.call_id, row.earlier_call_id, row.lost_call_id, row.tokens) == (calls[3].pk, None, None, 410)
    client = Client()
    client.force_login(member)
    reader = parse(client.get(f"/p/{project.slug}/calls/{calls[3].call_id}/").content.decode())
    assert reader.one('li[data-reread="res-2"]').text.count("an expired call") == 2


def test_it_finds_the_rereads_of_later_steps_when_an_earlier_call_arrives_late(project):
    steps = run(tool_pair(1), tool_pair(1), [item("sum", kind="summary", tokens=50)],
                [item("sum", kind="summary", tokens=50), *tool_pair(2, tokens=410)], compaction_at=2)
    later = store_and_analyse(project, steps[2:])
    assert not ReRead.objects.exists()  # nothing read before the compaction, yet
    earlier = store_and_analyse(project, steps[:2])
    row = ReRead.objects.get()
    assert (row.call_id, row.earlier_call_id, row.lost_call_id, row.tokens) == (
        later[1].pk, earlier[1].pk, later[0].pk, 410)


def long_run(steps: int, *, files: int, compact_every: int) -> list:
    """A run reading file ``k % files`` at step ``k``, each call holding the tool calls since the last
    compaction (every ``compact_every`` steps); expected re-reads: the first read of a file after a
    compaction that dropped an earlier read of it."""
    out = []
    for step in range(steps):
        since = (step // compact_every) * compact_every
        items = []
        for k in range(since, step + 1):
            key = sha(canonical_json({"name": "Read", "input": {"file_path": f"/repo/{k % files}.py"}}))[:32]
            items += [item(f"call-{k}", kind="history", group=f"tu-{k}", content_hash=key, tokens=20),
                      item(f"res-{k}", kind="tool_result", group=f"tu-{k}", label="Read", tokens=100 + k % files)]
        comps = [Compaction(id=f"cmp-{step}", strategy="summary", tokens_before=9000, tokens_after=100)] \
            if step and step == since else []
        out.append(manifest(f"long/{step}", bare=True, run_id="long", step=step, seconds=step, items=items,
                            compactions=comps))
    return out


def test_it_derives_the_rereads_of_a_long_run_chunk_by_chunk(project, monkeypatch):
    steps, files, every = 2000, 40, 10
    monkeypatch.setenv("CTXVIEW_ANALYSIS_CHUNK", "250")
    manifests = long_run(steps, files=files, compact_every=every)
    calls = [c for n in range(0, steps, 500) for c in store(project, manifests[n:n + 500])]
    analyze_calls([c.pk for c in calls])
    # Step k re-reads file k % 40 when an earlier read of it was compacted away: from step 40 on,
    # every read is one (the file's previous read, 40 steps back, is 4 compactions ago).
    got = list(ReRead.objects.filter(run__run_id="long").order_by("step").values_list("step", "tokens", "cause"))
    assert got == [(k, 100 + k % files, "compaction") for k in range(files, steps)]
    lost_at = dict(ReRead.objects.values_list("step", "lost_call_id"))
    by_step = {c.step: c.pk for c in calls}
    assert all(lost_at[k] == by_step[(k - files) // every * every + every] for k in range(files, steps))


def test_it_goes_on_from_the_walk_of_the_runs_last_chunk(project, monkeypatch):
    from manifests.analysis import rereads

    manifests = long_run(300, files=40, compact_every=10)
    analyze_calls([c.pk for c in store(project, manifests[:299])])
    decoded = []
    monkeypatch.setattr(rereads, "decode_manifest", lambda raw: decoded.append(raw) or decode_manifest(raw))
    last = store_and_analyse(project, manifests[299:])[0]
    assert len(decoded) == 1  # the new call alone, not the run's 300
    assert ReRead.objects.get(call=last).step == 299
    assert ReRead.objects.filter(run__run_id="long").count() == 300 - 40
    # A call stored late, before the walk's end, walks the run again from its start.
    decoded.clear()
    store_and_analyse(project, [manifest("long/late", bare=True, run_id="long", step=150, seconds=150.5)])
    assert len(decoded) == 301
    assert ReRead.objects.filter(run__run_id="long").count() == 300 - 40
