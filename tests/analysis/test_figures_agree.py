"""The SQL forms of the figures (manifests/figures.py) equal their Python definitions
(ctxkit.figures) on generated rows, on whichever database the suite runs on: tokens in
context, hit rate, uncached tokens, cost (relative and USD), the saving of a cache miss, a compaction's
net saving, and the input cap, input read, headroom and shares of the window."""

from __future__ import annotations

import pytest
from django.db.models import F, Sum, Value
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxkit import figures as ref
from ctxkit.breakdown import item_category
from ctxkit.context.layout import canonical_json
from ctxkit.manifest import ACTIONS, Budget
from ctxkit.models import model_facts
from manifests import figures
from manifests.models import Call, Compaction, Item, ReRead
from tests.analysis.support import item
from tests.support import manifest, store

pytestmark = pytest.mark.django_db

TOKENS = st.integers(min_value=0, max_value=2_000_000)
ITEMS = st.lists(
    st.tuples(st.sampled_from(ACTIONS), TOKENS, st.none() | TOKENS, st.none() | TOKENS, st.none() | st.integers(0, 50)),
    min_size=0, max_size=12,
)
USAGE = st.tuples(TOKENS, TOKENS, TOKENS, TOKENS)
EXAMPLES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def call(project):
    return store(project, [manifest("c1", bare=True, items=[item("seed")])])[0]


@EXAMPLES
@given(rows=ITEMS)
def test_it_counts_tokens_in_context_the_same_in_sql_and_python(call, rows):
    Item.objects.filter(call=call).delete()
    Item.objects.bulk_create([
        Item(call=call, project_id=call.project_id, started_at=call.started_at, ordinal=n, item_id=f"i{n}",
             kind="retrieval", action=action,
             requested_tokens=requested, granted_tokens=granted, used_tokens=used, position=position)
        for n, (action, requested, granted, used, position) in enumerate(rows)
    ])
    stored = list(Item.objects.filter(call=call).order_by("ordinal"))
    in_sql = set(Item.objects.filter(call=call).filter(figures.in_context()).values_list("ordinal", flat=True))
    assert in_sql == {i.ordinal for i in stored if ref.in_context(i)}
    per_item = dict(Item.objects.filter(call=call).annotate(t=figures.context_tokens()).values_list("ordinal", "t"))
    assert per_item == {i.ordinal: ref.context_tokens(i) for i in stored}
    total = Item.objects.filter(call=call).aggregate(t=Sum(figures.context_tokens()))["t"] or 0
    assert total == ref.total_context_tokens(stored)


@EXAMPLES
@given(usages=st.lists(USAGE, min_size=1, max_size=6))
def test_it_computes_hit_rate_uncached_and_cost_the_same_in_sql_and_python(call, usages):
    weights = {"input": 0.001, "output": 0.004, "cache_read": 0.0001, "cache_write": 0.00125}
    for input_tokens, read, write, output in usages:
        Call.objects.filter(pk=call.pk).update(input_tokens=input_tokens, cache_read_tokens=read,
                                               cache_write_tokens=write, output_tokens=output)
        row = Call.objects.filter(pk=call.pk).annotate(
            rate=figures.hit_rate(F("cache_read_tokens"), F("input_tokens")),
            uncached=figures.uncached_tokens(),
            cost=figures.cost_units(weights=weights),
            cost_seed=figures.cost_units(),
        ).get()
        expected_rate = ref.hit_rate(read, input_tokens)
        assert (row.rate is None) == (expected_rate is None)
        if expected_rate is not None:
            assert row.rate == pytest.approx(expected_rate, rel=1e-12)
        assert row.uncached == ref.uncached_tokens(row) == row.uncached_input_tokens
        assert row.cost == pytest.approx(ref.cost_units(row, weights), rel=1e-9)
        assert row.cost_seed == pytest.approx(ref.cost_units(row), rel=1e-9)
    # Over summed columns: the token-weighted rate of a bucket, None when nothing was read.
    totals = Call.objects.filter(pk=call.pk).aggregate(
        rate=figures.hit_rate(Sum("cache_read_tokens"), Sum("input_tokens")))
    last = usages[-1]
    assert totals["rate"] == (None if last[0] == 0 else pytest.approx(last[1] / last[0]))


@EXAMPLES
@given(usages=st.lists(st.tuples(USAGE, TOKENS), min_size=1, max_size=6))
def test_it_computes_the_saving_of_a_cache_miss_the_same_in_sql_and_python(call, usages):
    weights = {"input": 0.003, "output": 0.015, "cache_read": 0.0003, "cache_write": 0.00375}
    for (input_tokens, read, write, output), prefix in usages:
        Call.objects.filter(pk=call.pk).update(input_tokens=input_tokens, cache_read_tokens=read,
                                               cache_write_tokens=write, output_tokens=output, prefix_tokens=prefix)
        row = Call.objects.filter(pk=call.pk).annotate(
            saving=figures.cache_saving(weights=weights), saving_seed=figures.cache_saving()).get()
        assert row.saving == pytest.approx(ref.cache_saving(row, prefix, weights), rel=1e-9, abs=1e-9)
        assert row.saving_seed == pytest.approx(ref.cache_saving(row, prefix), rel=1e-9, abs=1e-9)
        # What was paid less the same call with its prefix read: both through cost_units.
        cached = ref.cached_usage(row, prefix)
        assert cached.input_tokens == input_tokens
        assert ref.uncached_tokens(cached) + cached.cache_read_tokens + cached.cache_write_tokens == max(
            input_tokens, read + write)
        assert row.saving >= 0
        if read >= prefix:
            assert row.saving == 0


@EXAMPLES
@given(usages=st.lists(st.tuples(USAGE, TOKENS, TOKENS), min_size=1, max_size=6))
def test_it_computes_the_usd_cost_and_saving_the_same_in_sql_and_python(call, usages):
    # The model's own USD prices (1-hour writes apart), as the analysis takes them.
    prices = model_facts("claude-opus-5-5").prices_at(0, call.started_at)
    for (input_tokens, read, write, output), write_1h, prefix in usages:
        Call.objects.filter(pk=call.pk).update(input_tokens=input_tokens, cache_read_tokens=read,
                                               cache_write_tokens=write, cache_write_1h_tokens=write_1h,
                                               output_tokens=output, prefix_tokens=prefix)
        row = Call.objects.filter(pk=call.pk).annotate(
            usd=figures.cost_usd(prices), saving_usd=figures.cache_saving(weights=prices.weights)).get()
        assert row.usd == pytest.approx(ref.cost_usd(row, prices), rel=1e-9)
        assert row.saving_usd == pytest.approx(ref.cache_saving(row, prefix, prices.weights), rel=1e-9, abs=1e-12)
        # The 1-hour writes cost more than the 5-minute ones they are part of, never less.
        if write and write_1h and prices.cache_write_1h > prices.cache_write:
            assert row.usd > ref.cost_units(row, {**prices.weights, "cache_write_1h": prices.cache_write})


COMPACTIONS = st.lists(
    # tokens before, after, and the tokens of each re-read its loss caused
    st.tuples(TOKENS, TOKENS, st.lists(st.integers(0, 200_000), max_size=4)),
    min_size=1, max_size=5,
)


@EXAMPLES
@given(compactions=COMPACTIONS)
def test_it_computes_the_net_saving_of_a_compaction_the_same_in_sql_and_python(call, compactions):
    Compaction.objects.filter(call=call).delete()
    ReRead.objects.filter(lost_call=call).delete()
    prices = model_facts("claude-opus-5-5").prices_at(0, call.started_at)
    weights = {"input": 0.003, "output": 0.015, "cache_read": 0.0003, "cache_write": 0.00375}
    for n, (before, after, rereads) in enumerate(compactions):
        Compaction.objects.create(call=call, project_id=call.project_id, started_at=call.started_at,
                                  event_id=f"cmp-{n}", strategy="summary", tokens_before=before, tokens_after=after)
        reread = dict(project_id=call.project_id, call=call, started_at=call.started_at, run_id=call.run_id,
                      step=call.step, result_item="r", earlier_item="e", lost_call=call, cause_ref=f"cmp-{n}")
        ReRead.objects.bulk_create([ReRead(group=f"g{n}-{k}", tokens=t, cause="compaction", **reread)
                                    for k, t in enumerate(rereads)])
        # A context edit of the same name and a re-read lost at another call are not the compaction's.
        ReRead.objects.create(group=f"edit-{n}", tokens=7, cause="context_edit", **reread)
        ReRead.objects.create(group=f"other-{n}", tokens=11, cause="compaction", **{**reread, "lost_call": None})
    rows = Compaction.objects.filter(call=call).annotate(
        reread=figures.compaction_reread_tokens(), net=figures.net_saving()).annotate(
        units=figures.net_saving_cost(F("net"), weights), usd=figures.net_saving_cost(F("net"), prices.weights),
        seed=figures.net_saving_cost(F("net"))).order_by("event_id")
    for row, (before, after, rereads) in zip(rows, compactions, strict=True):
        net = ref.net_saving(before, after, sum(rereads))
        assert (row.reread, row.net) == (sum(rereads), net)
        assert row.units == pytest.approx(ref.net_saving_cost(net, weights), rel=1e-12)
        assert row.usd == pytest.approx(ref.net_saving_cost(net, prices.weights), rel=1e-12)
        assert row.seed == pytest.approx(ref.net_saving_cost(net), rel=1e-12)


WINDOWS = st.tuples(
    st.integers(1, 2_000_000),  # window
    st.integers(0, 2_000_000),  # output reserve
    st.integers(0, 50_000),  # safety margin
    st.none() | st.integers(0, 2_000_000),  # a stated input cap, else window − reserve − margin
    st.sampled_from((0, 1, 5_230, 2_500_000)),  # the provider's input: none, some, over the window
    TOKENS,  # tokens in context
    st.floats(0.01, 1.0),  # effective limit ratio
)


@EXAMPLES
@given(window=WINDOWS, tool_part=st.floats(0.0, 1.0))
def test_it_computes_the_input_cap_headroom_and_window_shares_the_same_in_sql_and_python(call, window, tool_part):
    size, reserve, margin, stated, input_tokens, context, ratio = window
    tools = int(context * tool_part)
    cap = ref.input_cap(size, reserve, margin) if stated is None else stated
    Call.objects.filter(pk=call.pk).update(window=size, output_reserve=reserve, safety_margin=margin, input_cap=cap,
                                           input_tokens=input_tokens)
    ctx, tool = Value(context), Value(tools)
    read = figures.input_read(F("input_tokens"), ctx)
    limit = figures.effective_limit(F("window"), ratio)
    row = Call.objects.filter(pk=call.pk).annotate(
        cap_sql=figures.input_cap(F("window"), F("output_reserve"), F("safety_margin")), read=read,
        headroom=figures.headroom(F("input_cap"), read), utilization=figures.window_utilization(read, F("window")),
        reserve=figures.reserve_share(F("output_reserve"), F("window")), tools=figures.tool_share(tool, ctx),
        limit=limit, share=figures.effective_share(read, limit),
    ).get()
    expected_read = ref.input_read(input_tokens, context)
    expected_limit = ref.effective_limit(size, ratio)
    assert row.cap_sql == ref.input_cap(size, reserve, margin)
    assert (row.read, row.headroom, row.limit) == (expected_read, ref.headroom(cap, expected_read), expected_limit)
    assert row.utilization == pytest.approx(ref.window_utilization(expected_read, size), rel=1e-12)
    assert row.reserve == pytest.approx(ref.reserve_share(reserve, size), rel=1e-12)
    assert row.tools == pytest.approx(ref.tool_share(tools, context), rel=1e-12, abs=0)
    assert row.share == pytest.approx(ref.effective_share(expected_read, expected_limit), rel=1e-12)
    # A manifest's budget: its stated cap, else the same window − reserve − margin.
    assert ref.budget_input_cap(Budget(window=size, output_reserve=reserve, safety_margin=margin,
                                       input_cap=stated)) == cap


TOOL_NAMES = st.sampled_from(["Read", "mcp__github__search", "MCP__upper", "tool_mcp__x", "mcp_single"])
TOOL_TEXTS = st.one_of(
    st.none(),
    TOOL_NAMES.map(lambda n: canonical_json({"name": n, "description": "d", "input_schema": {}})),
    TOOL_NAMES.map(lambda n: canonical_json({"type": "function", "function": {"name": n}})),
    TOOL_NAMES.map(lambda n: canonical_json({"description": f'calls "name":"{n}"', "name": "Read"})),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40),
)


@EXAMPLES
@given(rows=st.lists(st.tuples(st.sampled_from(["tools", "system", "memory", "task"]), TOOL_TEXTS),
                     min_size=1, max_size=10))
def test_it_finds_mcp_tools_of_the_window_breakdown_the_same_in_sql_and_python(call, rows):
    Item.objects.filter(call=call).delete()
    Item.objects.bulk_create([
        Item(call=call, project_id=call.project_id, started_at=call.started_at, ordinal=n, item_id=f"i{n}",
             kind=kind, action="keep", requested_tokens=10, text=text)
        for n, (kind, text) in enumerate(rows)
    ])
    stored = list(Item.objects.filter(call=call).order_by("ordinal"))
    in_sql = dict(Item.objects.filter(call=call).annotate(m=figures.mcp_tool()).values_list("ordinal", "m"))
    assert in_sql == {i.ordinal: item_category(i) == "mcp_tools" for i in stored}
