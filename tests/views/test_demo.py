"""The demo data: each story of docs/dashboard.md is in it, built by ctxkit through the ingest path."""

from __future__ import annotations

import pytest

from manifests.demo import runs as demo
from manifests.models import CacheEvent, Call, Evidence, Invariant, Item, Regression

pytestmark = pytest.mark.django_db


def test_it_loses_the_429_at_budget_800_and_keeps_it_at_1200(demo_world):
    history = Item.objects.get(call__project=demo_world.project, call__call_id="refunds-budget-800/step-6",
                               item_id="history")
    assert history.granted_tokens == 79 and history.action == "summarize"
    assert "history got 79 tokens at budget 800" in history.reason
    ev = {c: Evidence.objects.get(call__project=demo_world.project, call__call_id=c, key="rate_limit").present
          for c in ("refunds-budget-800/step-5", "refunds-budget-800/step-6", "refunds-budget-1200/step-6")}
    assert ev == {"refunds-budget-800/step-5": True, "refunds-budget-800/step-6": False,
                  "refunds-budget-1200/step-6": True}


def test_it_has_a_summary_that_drops_the_users_constraint(demo_world):
    failed = Invariant.objects.get(compaction__project=demo_world.project, name="user_constraints", ok=False)
    assert failed.compaction.call.call_id == "coder-list-endpoint/step-6"
    assert failed.lost == ["do not change public API compatibility"]
    later = Evidence.objects.get(call__project=demo_world.project, call__call_id="coder-list-endpoint/step-8",
                                 key="api_compat")
    assert later.present is False


def test_it_has_an_untrusted_tool_result_carrying_an_injection(demo_world):
    page = Item.objects.get(call__project=demo_world.project, call__call_id="research-vendor-page/step-3",
                            item_id="web_page")
    assert page.trust == "untrusted" and page.position is not None
    assert demo.INJECTION_LITERAL in page.text


def test_it_has_a_cache_regression_when_the_timestamp_enters_the_system_prompt(demo_world):
    regression = Regression.objects.get(project=demo_world.project, agent="researcher")
    release = Call.objects.filter(project=demo_world.project, agent="researcher").order_by("started_at")
    first = release.filter(raw__contains="Current time:").first()
    assert regression.detected_at >= first.started_at
    event = CacheEvent.objects.get(call=release.filter(raw__contains="Current time:", step__gt=0).first())
    assert (event.cause, event.changed_segment) == ("prefix_changed", "system")
    assert "timestamp" in " ".join(first.warnings)  # ctxkit's layout warned about it
    before = release.filter(started_at__lt=first.started_at, step__gt=0).exclude(run__run_id="research-approval")
    assert CacheEvent.objects.filter(call__in=before, cause="hit").count() == before.count()


def test_it_has_an_approval_pause_longer_than_the_cache_ttl(demo_world):
    events = dict(CacheEvent.objects.filter(call__project=demo_world.project, call__run__run_id="research-approval")
                  .values_list("call__step", "cause"))
    assert events[4] == "ttl_expired" and events[3] == events[5] == "hit"


def test_it_gives_each_agent_its_own_system_prompt_and_tools(demo_world):
    prompts: dict[str, set[str]] = {}
    for agent, kind, content_hash in Item.objects.filter(
            call__project=demo_world.project, kind__in=["system", "tools"], call__step=0,
    ).exclude(call__run__run_id="research-vendor-page").values_list("call__agent", "kind", "content_hash"):
        prompts.setdefault(f"{agent}:{kind}", set()).add(content_hash)
    agents = {key.split(":")[0] for key in prompts}
    assert agents == {"researcher", "coder", "refund-analyst", "ops-monitor"}
    for kind in ("system", "tools"):
        hashes = [prompts[f"{a}:{kind}"] for a in sorted(agents)]
        # No two agents share a system prompt or a tool set.
        assert all(a.isdisjoint(b) for i, a in enumerate(hashes) for b in hashes[i + 1:]), kind


def test_it_writes_history_the_way_an_agent_does(demo_world):
    history = Item.objects.get(call__project=demo_world.project, call__call_id="research-001/step-5",
                               item_id="history")
    assert "noted; next step" not in (history.text or "")
    assert "duplicate_charge" in (history.text or "")


def test_it_has_a_long_run_with_context_edits(demo_world):
    calls = Call.objects.filter(project=demo_world.project, run__run_id="ops-refunds-watch")
    assert calls.count() == demo.OPS_STEPS >= 1000
    edited = calls.filter(context_edits__isnull=False).distinct()
    assert edited.count() == (demo.OPS_STEPS - 1) // demo.OPS_CLEAR_EVERY
    edit = edited.order_by("step").first().context_edits.get()
    assert edit.type == "clear_tool_uses_20250919" and edit.cleared_count > 0 and edit.cleared_tokens > 0
    # The prefix (system + tools + task) is large enough to be cached, and it is, poll after poll.
    assert calls.filter(cache_read_tokens__gt=0).count() > 0.9 * demo.OPS_STEPS
