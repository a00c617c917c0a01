"""The cache cause of a run's first call, against another run: a new session of an agent that
read nothing is compared with the latest earlier call of the same project, agent and model in
another run (docs/analysis.md, "The first call of a run"). Each call is the manifest the one
mapping of ctxkit.instrument and ctxkit proxy makes of an Anthropic request and response, posted
through the ingest API and analysed as the worker does."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ctxkit.instrumentation.bodies import manifest_from_bodies
from manifests import analysis
from manifests.analysis import cache
from manifests.analysis.prices import PriceBook
from manifests.models import CacheEvent, Call
from manifests.storage import partitions
from tests.analysis.test_cache_words import MCP_TOOL, RULES, TOOLS, WROTE
from tests.support import MODEL, T0

pytestmark = pytest.mark.django_db

READ = {"input_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 2600, "output_tokens": 30}
NOW = "Now: 2026-11-29T10:00:00Z"


def request(question: str, *, now: str = NOW, tools: list[dict] | None = None, model: str = MODEL) -> dict[str, Any]:
    """A session's request: tools, a system prompt of two blocks (the rules, then a line with the
    time, its cache breakpoint) and the session's own conversation, cached up to its last message."""
    control = {"type": "ephemeral"}
    return {"model": model, "max_tokens": 512, "tools": TOOLS if tools is None else tools,
            "system": [{"type": "text", "text": RULES}, {"type": "text", "text": now, "cache_control": control}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": question, "cache_control": control}]}]}


def session(run_id: str, questions: list[str], *, minutes: float, agent: str = "claude-cli",
            usage: dict[str, int] = WROTE, **kwargs: Any) -> list[dict[str, Any]]:
    """One session (a run) of calls 30 s apart from ``minutes`` after T0, each lasting 2 s."""
    out = []
    for step, question in enumerate(questions):
        body = request(question, **kwargs)
        answer = {"model": body["model"], "stop_reason": "end_turn", "content": [{"type": "text", "text": "ok"}],
                  "usage": usage}
        m = manifest_from_bodies("anthropic.messages", body, response=answer, call_id=f"{run_id}/step-{step}",
                                 run_id=run_id, step=step, agent=agent, duration=2.0,
                                 started=(T0 + timedelta(minutes=minutes, seconds=30 * step)).timestamp())
        out.append(msgspec.to_builtins(m))
    return out


def post_and_analyse(api, *runs: list[dict[str, Any]]) -> None:
    """Each run through POST /api/v1/manifests, then the analysis of its calls, in order."""
    for manifests in runs:
        response = api.post({"manifests": manifests})
        assert response.status_code == 200 and response.json()["accepted"] == len(manifests), response.content
        analysis.analyze_calls(list(Call.objects.filter(call_id__in=[m["call_id"] for m in manifests])
                                    .values_list("pk", flat=True)))


def event(call_id: str) -> CacheEvent:
    return CacheEvent.objects.select_related("previous_call").get(call__call_id=call_id)


def test_it_names_the_system_line_that_changed_since_the_previous_run(api):
    post_and_analyse(api, session("s1", ["Why was order 17 refunded twice?", "And order 18?"], minutes=0),
                     session("s2", ["Draft a reply to the customer."], minutes=2, now="Now: 2026-11-29T10:02:00Z"))
    first = event("s2/step-0")
    assert (first.cause, first.changed_segment) == (CacheEvent.PREFIX_CHANGED, "system")
    assert first.previous_call.call_id == "s1/step-1"
    assert first.detail == ("since the previous run's call s1/step-1: system prompt line 121 changed: "
                            "'Now: 2026-11-29T10:00:00Z' → 'Now: 2026-11-29T10:02:00Z'; the cache is lost from "
                            "there on")
    # From the end of the previous run's last call (30 s + 2 s) to the start of this one.
    assert first.gap_seconds == pytest.approx(120 - 32)
    assert first.previous_prefix_hash == Call.objects.get(call_id="s1/step-1").prefix_hash != first.prefix_hash
    # Within each run nothing changes: the second call of the first run is compared in its run.
    assert event("s1/step-1").previous_call.call_id == "s1/step-0"
    # A caller of classify that passes only the run's previous call (bench/scale_rollups.py) keeps
    # the first call's cold start.
    row = Call.objects.filter(call_id="s2/step-0").values(*cache.NEIGHBOUR_FIELDS).get()
    alone = cache.classify(row, None, PriceBook.load())
    assert (alone.cause, alone.previous_call_id, alone.detail) == (
        CacheEvent.COLD_START, None, "first call of the run: nothing cached yet")


def test_it_calls_an_unchanged_prefix_after_the_ttl_a_ttl_expiry_since_the_previous_run(api):
    post_and_analyse(api, session("s1", ["Why was order 17 refunded twice?"], minutes=0),
                     session("s2", ["Draft a reply to the customer."], minutes=45))
    first = event("s2/step-0")
    assert (first.cause, first.changed_segment) == (CacheEvent.TTL_EXPIRED, "")
    assert first.previous_call.call_id == "s1/step-0"
    assert first.detail == ("2698s since the previous run's call s1/step-0, longer than the cache TTL (5 min TTL "
                            "from the request's cache_control): an expected miss")


def test_it_calls_an_unchanged_prefix_within_the_ttl_that_read_nothing_a_cold_start(api):
    post_and_analyse(api, session("s1", ["Why was order 17 refunded twice?"], minutes=0),
                     session("s2", ["Draft a reply to the customer."], minutes=3))
    first = event("s2/step-0")
    assert (first.cause, first.previous_call.call_id) == (CacheEvent.COLD_START, "s1/step-0")
    # The conversations differ, as every new session's does: that is no prefix change.
    assert first.detail == ("since the previous run's call s1/step-0: same prefix up to its messages (each run has "
                            "its own conversation) within the TTL but nothing was read: the previous call did not "
                            "write the cache")


def test_it_names_an_mcp_server_connected_between_two_runs(api):
    post_and_analyse(api, session("s1", ["Why was order 17 refunded twice?"], minutes=0),
                     session("s2", ["Open an issue for it."], minutes=1, tools=[*TOOLS, MCP_TOOL]))
    first = event("s2/step-0")
    assert (first.cause, first.changed_segment) == (CacheEvent.PREFIX_CHANGED, "tools")
    assert first.detail == ("since the previous run's call s1/step-0: tool mcp__github__create_issue added: an MCP "
                            "server (github) connected; the cache is lost from there on")


def test_it_compares_only_with_earlier_runs_of_the_same_agent_model_and_project(api, other_key):
    from tests.conftest import Api

    post_and_analyse(api, session("other-agent", ["Hello"], minutes=0, agent="helpdesk"),
                     session("other-model", ["Hello"], minutes=1, model="claude-haiku-4-5"))
    post_and_analyse(Api(other_key), session("other-project", ["Hello"], minutes=2))
    post_and_analyse(api, session("s2", ["Draft a reply to the customer."], minutes=3, now="Now: changed"),
                     session("later", ["Hello"], minutes=4, agent="helpdesk", now="Now: later"))
    first = event("s2/step-0")
    assert (first.cause, first.previous_call) == (CacheEvent.COLD_START, None)
    assert first.detail == "first call of the run: nothing cached yet"
    # A run of another agent compares with that agent's earlier run only.
    assert event("later/step-0").previous_call.call_id == "other-agent/step-0"


def test_it_keeps_a_first_call_that_read_from_the_cache_a_hit(api):
    post_and_analyse(api, session("s1", ["Why was order 17 refunded twice?"], minutes=0),
                     session("s2", ["Draft a reply to the customer."], minutes=2, usage=READ))
    first = event("s2/step-0")
    assert (first.cause, first.previous_call) == (CacheEvent.HIT, None)
    assert first.detail == "first call of the run, cache warm from another run"


def test_it_looks_back_a_day_at_most_and_only_before_the_call(api):
    post_and_analyse(api, session("day-before", ["Why was order 17 refunded twice?"], minutes=-25 * 60),
                     session("s2", ["Draft a reply to the customer."], minutes=0),
                     session("s3", ["And now?"], minutes=23 * 60))
    assert (event("s2/step-0").cause, event("s2/step-0").previous_call) == (CacheEvent.COLD_START, None)
    later = event("s3/step-0")
    assert (later.cause, later.previous_call.call_id) == (CacheEvent.TTL_EXPIRED, "s2/step-0")
    assert later.gap_seconds == pytest.approx(23 * 3600 - 2)


def test_it_reads_only_the_days_of_the_lookback_to_find_the_previous_run(api):
    old = session("old", ["Why was order 17 refunded twice?"], minutes=-60 * 24 * 60)
    recent = session("s1", ["Why?"], minutes=-10)
    post_and_analyse(api, old, recent)
    with CaptureQueriesContext(connection) as ctx:
        post_and_analyse(api, session("s2", ["Draft a reply to the customer."], minutes=0))
    assert event("s2/step-0").previous_call.call_id == "s1/step-0"
    [lookup] = [q["sql"] for q in ctx.captured_queries if '"earlier_pk"' in q["sql"]]
    table = Call._meta.db_table
    # The subquery bounds the partition key by literals (the first calls' times), which PostgreSQL
    # prunes by when it plans, besides each call's own time.
    assert """U0."started_at" >= '""" in lookup and """U0."started_at" < '""" in lookup, lookup
    if partitions.enabled():
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {lookup}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        read = {name for name in partitions.partition_days(table) if partitions.partition_name(table, name) in plan}
        assert read and read <= {partitions.day_of(T0 - timedelta(days=1)), partitions.day_of(T0)}, plan
