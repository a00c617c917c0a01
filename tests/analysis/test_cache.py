"""Cache causes within a run, and the prefix registry."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ctxkit.context.prefix_lines import prefix_segment
from ctxkit.manifest import Prefix, Usage
from manifests import analysis
from manifests.models import CacheEvent, Call, PrefixEntry
from tests.analysis.support import STABLE, SYSTEM, TOOLS, item, prefix, sha
from tests.support import T0, manifest, store, store_and_analyse

pytestmark = pytest.mark.django_db

WARM = Usage(input_tokens=3000, cache_read_tokens=1500, output_tokens=100)
COLD = Usage(input_tokens=3000, cache_write_tokens=1500, output_tokens=100)
NOTHING = Usage(input_tokens=3000, output_tokens=100)


def call(call_id, step, *, seconds=None, usage=WARM, prefix_=STABLE, **kwargs):
    return manifest(call_id, bare=True, step=step, seconds=10 * step if seconds is None else seconds, usage=usage,
                    prefix=prefix_, items=[item("q", kind="user")], **kwargs)


def events(calls):
    return [CacheEvent.objects.get(call=c) for c in calls]


def test_it_calls_the_first_call_of_a_run_a_cold_start(project):
    (first,) = events(store_and_analyse(project, [call("c0", 0, usage=COLD)]))
    assert first.cause == CacheEvent.COLD_START
    assert first.previous_call is None and first.gap_seconds is None and first.previous_hit_ratio is None
    assert "first call of the run" in first.detail


def test_it_calls_a_read_of_the_same_prefix_a_hit(project):
    _, second = events(store_and_analyse(project, [call("c0", 0, usage=COLD), call("c1", 1)]))
    assert second.cause == CacheEvent.HIT
    assert second.hit_ratio == pytest.approx(0.5) and second.previous_hit_ratio == 0
    assert second.previous_call.call_id == "c0" and second.gap_seconds == 10


def test_it_names_the_system_segment_when_a_timestamp_changed_the_system_prompt(project):
    stamped = prefix(system=(SYSTEM[0] + " Now: 2026-11-29T10:00:10Z", 610), tools=TOOLS)
    calls = store_and_analyse(project, [call("c0", 0, usage=COLD), call("c1", 1, prefix_=stamped, usage=COLD)])
    changed = events(calls)[1]
    assert changed.cause == CacheEvent.PREFIX_CHANGED
    assert changed.changed_segment == "system"
    assert changed.prefix_hash == stamped.hash and changed.previous_prefix_hash == STABLE.hash
    assert "segment 'system' changed" in changed.detail


def test_it_names_the_tools_segment_when_the_tool_list_was_reordered(project):
    reordered = prefix(system=SYSTEM, tools=('[{"name": "get_logs"}, {"name": "get_refund"}]', 900))
    calls = store_and_analyse(project, [call("c0", 0), call("c1", 1, prefix_=reordered, usage=COLD)])
    changed = events(calls)[1]
    assert (changed.cause, changed.changed_segment) == (CacheEvent.PREFIX_CHANGED, "tools")


def test_it_names_the_first_segment_when_segments_swap_places(project):
    swapped = prefix(tools=TOOLS, system=SYSTEM)
    calls = store_and_analyse(project, [call("c0", 0), call("c1", 1, prefix_=swapped, usage=COLD)])
    changed = events(calls)[1]
    assert (changed.cause, changed.changed_segment) == (CacheEvent.PREFIX_CHANGED, "tools")
    assert "reordered" in changed.detail


def test_it_calls_a_miss_after_a_long_gap_a_ttl_expiry(project):
    calls = store_and_analyse(project, [call("c0", 0, usage=COLD), call("c1", 1, seconds=40 * 60, usage=COLD)])
    expired = events(calls)[1]
    assert expired.cause == CacheEvent.TTL_EXPIRED
    assert expired.gap_seconds == pytest.approx(40 * 60)
    assert "longer than the cache TTL (5 min, the model's TTL in the price table)" in expired.detail


def test_it_measures_the_gap_from_the_end_of_the_previous_call(project):
    first = call("c0", 0, usage=COLD, ended_at=T0 + timedelta(minutes=4))
    calls = store_and_analyse(project, [first, call("c1", 1, seconds=6 * 60, usage=COLD)])
    # 6 minutes after the start but 2 after the end: within the 5-minute TTL.
    assert events(calls)[1].gap_seconds == pytest.approx(120)
    assert events(calls)[1].cause == CacheEvent.COLD_START


def test_it_calls_a_prefix_below_the_provider_minimum_below_minimum(project):
    short = prefix(system=("Be brief.", 300), tools=("[]", 200))
    calls = store_and_analyse(project, [call("c0", 0, prefix_=short, usage=NOTHING),
                                        call("c1", 1, prefix_=short, usage=NOTHING)])
    assert [e.cause for e in events(calls)] == [CacheEvent.BELOW_MINIMUM, CacheEvent.BELOW_MINIMUM]
    assert "below the provider's minimum (1024)" in events(calls)[1].detail


def test_it_treats_a_model_switch_as_a_changed_prefix(project):
    calls = store_and_analyse(project, [call("c0", 0), call("c1", 1, model="claude-haiku-4-5", usage=COLD)])
    switched = events(calls)[1]
    assert (switched.cause, switched.changed_segment) == (CacheEvent.PREFIX_CHANGED, "model")


def test_it_compares_a_late_call_and_re_derives_its_successor(project):
    stamped = prefix(system=(SYSTEM[0] + " run 2", 610), tools=TOOLS)
    early = store_and_analyse(project, [call("c0", 0, usage=COLD), call("c2", 2, prefix_=stamped, usage=COLD)])
    assert events(early)[1].previous_call.call_id == "c0"
    # Step 1 arrives late with the new prefix: step 2 now follows it and hits.
    store_and_analyse(project, [call("c1", 1, prefix_=stamped, usage=COLD)])
    c1, c2 = (CacheEvent.objects.get(call__call_id=x) for x in ("c1", "c2"))
    assert (c1.cause, c1.changed_segment, c1.previous_call.call_id) == (CacheEvent.PREFIX_CHANGED, "system", "c0")
    assert (c2.previous_call.call_id, c2.cause) == ("c1", CacheEvent.COLD_START)


def test_it_orders_a_run_by_step_not_by_arrival(project):
    calls = store_and_analyse(project, [call("c3", 3), call("c1", 1, usage=COLD), call("c2", 2)])
    by_id = {e.call.call_id: e for e in events(calls)}
    assert by_id["c1"].previous_call is None
    assert by_id["c2"].previous_call.call_id == "c1" and by_id["c3"].previous_call.call_id == "c2"


def test_it_keeps_a_registry_of_every_prefix(project):
    stamped = prefix(system=(SYSTEM[0] + "!", 601), tools=TOOLS)
    calls = store_and_analyse(project, [call("c0", 0), call("c1", 1), call("c2", 2, prefix_=stamped),
                                        call("x0", 0, run_id="run-2", seconds=3600)])
    stable = PrefixEntry.objects.get(project=project, prefix_hash=STABLE.hash)
    assert stable.calls == 3 and stable.tokens == 1500
    assert (stable.first_seen, stable.last_seen) == (T0, T0 + timedelta(hours=1))
    assert [s["name"] for s in stable.segments] == ["system", "tools"]
    assert PrefixEntry.objects.get(project=project, prefix_hash=stamped.hash).calls == 1
    # Re-analysing, and a redelivered task, count nothing twice.
    analysis.analyze_calls([c.pk for c in calls])
    analysis.analyze_calls([c.pk for c in calls], force=True)
    assert PrefixEntry.objects.get(project=project, prefix_hash=STABLE.hash).calls == 3


def test_it_extends_a_registry_entry_across_batches(project):
    store_and_analyse(project, [call("c5", 5, seconds=50)])
    store_and_analyse(project, [call("c1", 1, seconds=-3600)])
    entry = PrefixEntry.objects.get(project=project, prefix_hash=STABLE.hash)
    assert entry.calls == 2
    assert (entry.first_seen, entry.last_seen) == (T0 - timedelta(hours=1), T0 + timedelta(seconds=50))


def test_it_skips_calls_already_analysed(project):
    (stored,) = store(project, [call("c0", 0)])
    assert analysis.analyze_calls([stored.pk]) == 1
    assert analysis.analyze_calls([stored.pk]) == 0
    assert Call.objects.get(pk=stored.pk).analyzed_at is not None


def test_it_uses_the_ttl_the_agent_recorded_for_an_expected_miss(project):
    # A pause longer than the TTL in force makes the next miss expected (TTL expired).
    # 2 minutes is within the price book's 5-minute TTL, but the agent recorded a 60 s TTL.
    first = call("c0", 0, usage=COLD, cache_ttl_seconds=60)
    second = call("c1", 1, seconds=120, usage=COLD, cache_ttl_seconds=60)
    expired = events(store_and_analyse(project, [first, second]))[1]
    assert expired.cause == CacheEvent.TTL_EXPIRED
    assert expired.detail.endswith("longer than the cache TTL (1 min, the TTL the agent recorded): an expected miss")


def test_it_keeps_a_longer_recorded_ttl_from_calling_a_pause_an_expiry(project):
    # A one-hour cache: a 10-minute approval pause is not a TTL expiry, whatever the price book says.
    first, second = call("c0", 0, usage=COLD, cache_ttl_seconds=3600), call("c1", 1, seconds=600, usage=COLD)
    (stored, later) = store_and_analyse(project, [first, second])
    assert Call.objects.get(pk=stored.pk).cache_ttl_seconds == 3600
    assert events([stored, later])[1].cause == CacheEvent.COLD_START


def conversation(*turns: str) -> Prefix:
    """The stable prefix of an agent whose cache breakpoint is on its newest message: system,
    then every message so far as the ``messages`` segment, with line hashes (as instrument() sends)."""
    text = "\n".join(turns)
    segments = [prefix_segment(name="system", hash=sha(SYSTEM[0]), tokens=1200, text=SYSTEM[0], include_text=False),
                prefix_segment(name="messages", hash=sha(text), tokens=30 * len(turns), text=text, include_text=False)]
    return Prefix(hash=sha("".join(s.hash for s in segments)), tokens=sum(s.tokens for s in segments),
                  segments=segments)


def test_it_calls_a_read_after_the_conversation_grew_a_hit_not_a_prefix_change(project):
    # The breakpoint on the newest message moves at every call: the messages segment grows, but
    # it starts with what the previous call wrote, which is read. Not a prefix change.
    first = call("c0", 0, usage=COLD, prefix_=conversation("user: refund?"))
    second = call("c1", 1, prefix_=conversation("user: refund?", "assistant: checking", "user: thanks"))
    grown = events(store_and_analyse(project, [first, second]))[1]
    assert (grown.cause, grown.changed_segment) == (CacheEvent.HIT, "")
    assert "segment 'messages' gained 2 lines at its end" in grown.detail


def test_it_still_names_a_changed_line_inside_the_grown_segment(project):
    first = call("c0", 0, usage=COLD, prefix_=conversation("user: refund?", "assistant: checking"))
    second = call("c1", 1, prefix_=conversation("user: refund?", "assistant: edited", "user: thanks"))
    changed = events(store_and_analyse(project, [first, second]))[1]
    assert (changed.cause, changed.changed_segment) == (CacheEvent.PREFIX_CHANGED, "messages")


def test_it_counts_growth_without_line_hashes_as_a_change(project):
    # Without line hashes nothing shows that the segment only grew.
    first = call("c0", 0, usage=COLD, prefix_=prefix(system=SYSTEM, messages=("user: refund?", 30)))
    second = call("c1", 1, prefix_=prefix(system=SYSTEM, messages=("user: refund?\nuser: thanks", 60)))
    changed = events(store_and_analyse(project, [first, second]))[1]
    assert (changed.cause, changed.changed_segment) == (CacheEvent.PREFIX_CHANGED, "messages")


def test_it_calls_a_grown_prefix_a_hit_when_a_segment_was_added_after_it(project):
    first = call("c0", 0, usage=COLD, prefix_=prefix(system=SYSTEM))
    second = call("c1", 1, prefix_=prefix(system=SYSTEM, tools=TOOLS))
    grown = events(store_and_analyse(project, [first, second]))[1]
    assert grown.cause == CacheEvent.HIT and "segment 'tools' was added after it" in grown.detail


def test_it_gives_a_miss_after_growth_the_cause_an_unchanged_prefix_would_get(project):
    # Growth explains nothing about a miss: within the TTL the previous call did not write the
    # cache; after the TTL the cache expired.
    first = call("c0", 0, usage=COLD, prefix_=conversation("user: refund?"))
    within = call("c1", 1, usage=NOTHING, prefix_=conversation("user: refund?", "user: thanks"))
    late = call("c2", 2, seconds=3620, usage=NOTHING, prefix_=conversation("user: refund?", "user: thanks", "u: ?"))
    _, missed, expired = events(store_and_analyse(project, [first, within, late]))
    assert missed.cause == CacheEvent.COLD_START and "starts with the previous call's" in missed.detail
    assert expired.cause == CacheEvent.TTL_EXPIRED


def test_it_tries_the_cause_rules_in_the_order_the_docs_list_them():
    import re
    from pathlib import Path

    from manifests.analysis.cache_causes import RULES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "analysis.md").read_text(encoding="utf-8")
    section = doc.split("### Within a run: a cause for every call", 1)[1].split("\n### ", 1)[0]
    listed = re.findall(r"^\d+\. `(\w+)`", section, flags=re.M)
    assert listed == [rule.__name__ for rule in RULES]
    assert len(listed) == 8
