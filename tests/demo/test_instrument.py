"""The demo's ctxkit.instrument run (manifests/demo/instrument.py): the real anthropic client,
instrumented with one line, answered in-process like the Messages API; its manifests stored
through the ingest service and read back through the dashboard's selectors."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.http import QueryDict
from django.test import Client

from manifests import analysis, ingest, services
from manifests.demo import instrument as demo_instrument
from manifests.models import CacheEvent, Call, Evidence, Item, Project
from manifests.selectors import filters, runs
from manifests.selectors.calls import previous_call
from manifests.selectors.prefix_lines import line_diff

pytestmark = pytest.mark.django_db

CLOCK = datetime(2026, 12, 1, 9, 14, 37, tzinfo=UTC)


def _project(name: str = "Helpdesk") -> Project:
    owner = get_user_model().objects.create_user(f"owner-{name.lower()}", password="pw-for-tests-only")
    return services.create_project(name=name, owner=owner)


def _calls(project: Project) -> list[Call]:
    return list(Call.objects.filter(project=project, run__run_id=demo_instrument.RUN_ID).order_by("step"))


def test_it_records_each_call_of_the_real_client_as_instrument_does_in_production():
    project = _project()
    assert demo_instrument.load(project=project, now=CLOCK) == {"accepted": 8, "duplicates": 0}
    calls = _calls(project)
    assert [c.step for c in calls] == list(range(demo_instrument.STEPS))
    assert {(c.agent, c.model, c.provider, c.builder_name) for c in calls} == {
        ("helpdesk", "claude-sonnet-4-6", "anthropic", "ctxkit.instrument")}
    assert [c.finish_reason for c in calls] == [
        "tool_use", "tool_use", "tool_use", "end_turn", "tool_use", "tool_use", "end_turn", "tool_use"]
    last = Item.objects.filter(call=calls[-1]).order_by("ordinal")
    kinds = list(last.values_list("kind", flat=True))
    assert kinds[:6] == ["tools"] * 5 + ["system"] and kinds.count("tool_result") == 5
    # A tool call and its result share their group (the tool_use id).
    credit = last.get(source_ref="messages[10].content[0]")
    assert credit.kind == "tool_result" and "CR-0907" in credit.text
    assert last.filter(group=credit.group).count() == 2
    # The per-call ctxview={"evidence": ...} of step 3: found in the invoices tool result.
    evidence = Evidence.objects.get(call=calls[3], key="duplicated invoice")
    assert evidence.present and evidence.found_in == "messages[4].content[0]"


def test_it_reads_the_prefix_from_the_cache_except_at_the_start_and_where_the_clock_turns():
    project = _project()
    demo_instrument.load(project=project, now=CLOCK)
    calls = _calls(project)
    prefix = calls[0].prefix_tokens
    assert prefix >= 1024  # cacheable at all
    assert [c.cache_read_tokens > 0 for c in calls] == [False, True, True, True, True, False, True, True]
    assert [c.cache_write_tokens > 0 for c in calls] == [True, False, False, False, False, True, False, False]
    assert all(abs(c.cache_read_tokens + c.cache_write_tokens - prefix) <= 2 for c in calls)

    steps = runs.run_steps(calls[0].run)
    assert [(s["cache_cause"], s["cache_segment"]) for s in steps] == [
        ("cold_start", ""), ("hit", ""), ("hit", ""), ("hit", ""), ("hit", ""),
        ("prefix_changed", "system"), ("hit", ""), ("hit", "")]
    assert steps[1]["hit_rate"] > 0.8  # the prefix is most of an early call
    [run] = runs.runs_page(project, filters.parse(QueryDict("agent=helpdesk&range=30d")), 1).object_list
    read, total = sum(c.cache_read_tokens for c in calls), sum(c.input_tokens for c in calls)
    assert run.call_count == 8 and run.hit_rate == pytest.approx(read / total)
    assert 0.5 < run.hit_rate < 0.7


def test_it_shows_the_line_of_the_system_prompt_that_changed():
    project = _project()
    demo_instrument.load(project=project, now=CLOCK)
    changed = _calls(project)[demo_instrument.TICK_AT_STEP]
    before = previous_call(changed)
    diff = line_diff(before.prefix_segments, changed.prefix_segments)
    assert [(r.segment, r.line, r.change, r.before, r.after) for r in diff.rows] == [
        ("system", 3, "changed", "Current time: 2026-12-01 09:14 UTC", "Current time: 2026-12-01 09:15 UTC")]

    browser = Client()
    browser.force_login(project.members.get())
    page = browser.get(f"/p/{project.slug}/calls/{changed.call_id}/")
    assert page.status_code == 200
    assert "line 3 of <b>system</b> changed: <code>Current time: 2026-12-01 09:14 UTC</code>" in page.content.decode()


def test_it_stores_the_run_once_and_numbers_its_steps_from_zero_in_every_project():
    first, second = _project("First"), _project("Second")
    demo_instrument.load(project=first, now=CLOCK)
    assert demo_instrument.load(project=first, now=CLOCK) == {"accepted": 0, "duplicates": 8}
    assert len(_calls(first)) == 8
    # Same process, same run id: instrument() would go on counting from step 8.
    demo_instrument.load(project=second, now=CLOCK)
    assert [c.step for c in _calls(second)] == list(range(8))


def test_it_calls_reads_after_the_breakpoint_moved_to_the_newest_message_hits():
    # Anthropic's advice for a conversation: a cache breakpoint on the newest message, so each call
    # reads what the previous one wrote. The stand-in caches block by block as Anthropic does;
    # instrument()'s messages segment grows at every call, which is not a prefix change.
    project = _project()
    report = ingest.ingest_body(project=project, body=demo_instrument.record(now=CLOCK, mark_latest=True))
    analysis.analyze_calls(report.stored_call_ids)
    calls = _calls(project)
    reads = [c.cache_read_tokens for c in calls]
    assert [r > 0 for r in reads] == [False, True, True, True, True, False, True, True]
    assert reads[1] < reads[2] < reads[3] < reads[4] and reads[6] < reads[7]  # the conversation, read back
    steps = runs.run_steps(calls[0].run)
    assert [(s["cache_cause"], s["cache_segment"]) for s in steps] == [
        ("cold_start", ""), ("hit", ""), ("hit", ""), ("hit", ""), ("hit", ""),
        ("prefix_changed", "system"), ("hit", ""), ("hit", "")]
    assert "segment 'messages' gained" in CacheEvent.objects.get(call=calls[1]).detail
