"""Prompt-cache analysis (docs/analysis.md): a cause for every call's cache outcome
within its run, and the prefix registry.

Prompt caching matches a prefix token by token: at the first difference the rest
of the cache is lost. So each call is compared with the previous call of its run
(by step, then time): a changed prefix hash is pinned to the first segment whose
hash changed; an unchanged prefix that still missed waited longer than the TTL;
the first call of a run that read nothing is compared in the same way with the
latest earlier call of its agent and model in another run (a new session that
missed what the last one wrote), and is a cold start when there is none; a
prefix shorter than the provider's minimum is never cached at all. The details say it in the words of what changed
(cache_words.py): the system line, the tools by name, the earlier messages and
the context edit or compaction that removed them, the TTL and where it came from.
The rules that give the cause are a table in cache_causes.py; this module finds the calls to
compare and stores the causes. Regressions across runs live in regressions.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper, OuterRef, Q, Subquery

from ctxkit import figures as fig
from ctxkit.manifest import Usage
from manifests.analysis import cache_words
from manifests.analysis.cache_causes import Seen, cause_of
from manifests.analysis.data import clean
from manifests.analysis.prices import PriceBook, usd_prices
from manifests.models import CacheEvent, Call, Compaction, ContextEdit, PrefixEntry
from manifests.storage import partitions

NEIGHBOUR_FIELDS = (
    "pk",
    "project_id",
    "run_id",
    "step",
    "agent",
    "model",
    "started_at",
    "ended_at",
    "prefix_hash",
    "prefix_tokens",
    "prefix_segments",
    "cache_ttl_seconds",
    "builder_name",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "provider",
    "analyzed_at",
    "call_id",
)
# How far before the first call of a run the call of another run it is compared with may be
# (docs/analysis.md): a day, so the lookup reads at most two daily partitions.
CROSS_RUN_LOOKBACK = timedelta(hours=24)
EVENT_FIELDS = [
    "previous_call",
    "cause",
    "changed_segment",
    "gap_seconds",
    "hit_ratio",
    "previous_hit_ratio",
    "prefix_hash",
    "previous_prefix_hash",
    "detail",
    "started_at",
    "run",
    "agent",
    "model",
    "saving",
    "saving_usd",
]


def _hit_ratio(c: dict[str, Any]) -> float | None:
    return fig.hit_rate(c["cache_read_tokens"], c["input_tokens"])


def compares_across_runs(call: dict[str, Any], prices: PriceBook) -> bool:
    """Whether the first call of a run is compared with another run's call: it read nothing
    from the cache and its cacheable prefix is not below the provider's minimum."""
    cacheable = call["prefix_tokens"] if call["prefix_hash"] else call["input_tokens"]
    across: bool = call["cache_read_tokens"] == 0 and cacheable >= prices.for_model(call["model"]).min_cacheable_tokens
    return across


def classify(call: dict[str, Any], prev: dict[str, Any] | None, prices: PriceBook, *,
             earlier: dict[str, Any] | None = None) -> CacheEvent:
    """The cause of one call's cache outcome, given the previous call of its run (``prev``).

    ``earlier``, for the first call of a run (``prev`` None): the latest earlier call of its
    project, agent and model in another run (:func:`earlier_in_other_runs`). A first call that
    read nothing (:func:`compares_across_runs`) is compared with it as with a previous call, in
    words that name it, except that the ``messages`` segment (each run's own conversation) is
    not compared. Without it, a first call is a cold start, or a hit from a cache another run
    warmed."""
    price = prices.for_model(call["model"])
    seen = Seen(call, prev, price)
    if prev is None and earlier is not None and compares_across_runs(call, prices):
        who = cache_words.previous_run_call(str(earlier.get("call_id", "")))
        seen = Seen(call, earlier, price, across=True, who=who)
    compared = seen.prev
    verdict = cause_of(seen)
    detail = f"since {seen.who}: {verdict.detail}" if seen.across and not verdict.names_previous else verdict.detail
    read = call["cache_read_tokens"]
    usage = Usage(input_tokens=call["input_tokens"], cache_read_tokens=read,
                  cache_write_tokens=call["cache_write_tokens"], output_tokens=call["output_tokens"],
                  cache_write_1h_tokens=call["cache_write_1h_tokens"])
    usd = usd_prices(price, call["model"], call["provider"], call["input_tokens"], call["started_at"])
    return CacheEvent(
        project_id=call["project_id"],
        call_id=call["pk"],
        previous_call_id=compared["pk"] if compared is not None else None,
        cause=verdict.cause,
        changed_segment=clean(verdict.segment)[:200],
        gap_seconds=seen.gap,
        hit_ratio=_hit_ratio(call),
        previous_hit_ratio=_hit_ratio(compared) if compared is not None else None,
        prefix_hash=call["prefix_hash"],
        previous_prefix_hash=compared["prefix_hash"] if compared is not None else "",
        detail=clean(detail),
        started_at=call["started_at"],
        run_id=call["run_id"],
        agent=call["agent"],
        model=call["model"],
        saving=fig.cache_saving(usage, call["prefix_tokens"], price.weights),
        saving_usd=None if usd is None else fig.cache_saving(usage, call["prefix_tokens"], usd.weights),
    )


def _neighbour(direction: str) -> Subquery:
    """The previous ("prev") or next ("next") call of the same run, by (step, started_at, pk).
    The redundant step bound lets the (run, step) index find it in one probe."""
    if direction == "prev":
        bound = Q(step__lte=OuterRef("step"))
        before = Q(step__lt=OuterRef("step")) | Q(step=OuterRef("step"), started_at__lt=OuterRef("started_at")) | Q(
            step=OuterRef("step"), started_at=OuterRef("started_at"), pk__lt=OuterRef("pk")
        )
        order = ("-step", "-started_at", "-pk")
    else:
        bound = Q(step__gte=OuterRef("step"))
        before = Q(step__gt=OuterRef("step")) | Q(step=OuterRef("step"), started_at__gt=OuterRef("started_at")) | Q(
            step=OuterRef("step"), started_at=OuterRef("started_at"), pk__gt=OuterRef("pk")
        )
        order = ("step", "started_at", "pk")
    return Subquery(Call.objects.filter(bound, before, run_id=OuterRef("run_id")).order_by(*order).values("pk")[:1])


def _add_removals(rows: dict[int, dict[str, Any]]) -> None:
    """Give each call row what its request lost by design, for the words of a messages change:
    ``context_edits`` (the types of its context edits) and ``compactions`` (the strategies of
    its compactions). Read only when some call caches messages, from the calls' days' partitions."""
    found: dict[str, dict[int, list[str]]] = {"context_edits": defaultdict(list), "compactions": defaultdict(list)}
    cached = any(isinstance(s, dict) and s.get("name") == "messages"
                 for r in rows.values() for s in r["prefix_segments"] or [])
    days = partitions.span(r["started_at"] for r in rows.values())
    tables = (("context_edits", ContextEdit, "type"), ("compactions", Compaction, "strategy")) if cached else ()
    for key, model, field in tables:
        for call_pk, value in (model.objects.filter(call_id__in=list(rows), **days)
                               .order_by("call_id", "pk").values_list("call_id", field)):
            if value not in found[key][call_pk]:
                found[key][call_pk].append(value)
    for pk, row in rows.items():
        row["context_edits"] = found["context_edits"].get(pk, [])
        row["compactions"] = found["compactions"].get(pk, [])


def earlier_in_other_runs(firsts: list[dict[str, Any]]) -> dict[int, int]:
    """For first calls of runs (rows with pk, project_id, run_id, agent, model, started_at), the
    pk of the call each one is compared with: the latest call (by started_at, then pk) of the same
    project, agent and model in another run that started before it, at most
    ``CROSS_RUN_LOOKBACK`` before it. Calls without one are left out.

    One statement, one index probe per first call on (project, agent, model, started_at): the
    bound by the calls' own times (between the earliest one less the lookback and the latest)
    names the partition key, so PostgreSQL reads only those days' partitions."""
    if not firsts:
        return {}
    times = [c["started_at"] for c in firsts]
    since = ExpressionWrapper(OuterRef("started_at") - CROSS_RUN_LOOKBACK, output_field=DateTimeField())
    latest = (
        Call.objects.filter(project_id=OuterRef("project_id"), agent=OuterRef("agent"), model=OuterRef("model"),
                            started_at__lt=OuterRef("started_at"), started_at__gte=since)
        .filter(started_at__gte=min(times) - CROSS_RUN_LOOKBACK, started_at__lt=max(times))
        .exclude(run_id=OuterRef("run_id"))
        .order_by("-started_at", "-pk")
        .values("pk")[:1]
    )
    found = (Call.objects.filter(pk__in=[c["pk"] for c in firsts], **partitions.span(times))
             .annotate(earlier_pk=Subquery(latest)).values_list("pk", "earlier_pk"))
    return {pk: earlier_pk for pk, earlier_pk in found if earlier_pk is not None}


def update_cache_events(call_pks: list[int], prices: PriceBook) -> list[dict[str, Any]]:
    """Write the cache event of every given call, and re-derive the event of each one's
    successor in its run when that one was already analysed (a late call changes what
    its successor is compared with). Returns the rows of the successors re-derived.

    The first call of a run that read nothing is compared with the latest earlier call of
    another run (:func:`earlier_in_other_runs`). A call that arrives late does not re-derive
    the first calls of other runs that it would now precede: only a re-analysis of those
    (``manage.py reanalyse_calls``) compares them again."""
    links = list(
        Call.objects.filter(pk__in=call_pks)
        .annotate(prev_pk=_neighbour("prev"), next_pk=_neighbour("next"))
        .values_list("pk", "prev_pk", "next_pk")
    )
    wanted = set(call_pks)
    for _, prev_pk, next_pk in links:
        wanted.update(pk for pk in (prev_pk, next_pk) if pk is not None)
    rows = {r["pk"]: r for r in Call.objects.filter(pk__in=wanted).values(*NEIGHBOUR_FIELDS)}
    firsts = [rows[pk] for pk, prev_pk, _ in links if prev_pk is None and compares_across_runs(rows[pk], prices)]
    across = earlier_in_other_runs(firsts)
    missing = set(across.values()) - set(rows)
    if missing:
        times = [c["started_at"] for c in firsts]
        rows.update((r["pk"], r) for r in Call.objects.filter(
            pk__in=missing, started_at__gte=min(times) - CROSS_RUN_LOOKBACK, started_at__lt=max(times),
        ).values(*NEIGHBOUR_FIELDS))
    _add_removals(rows)
    chunk = set(call_pks)
    events: dict[int, CacheEvent] = {}
    successors: list[dict[str, Any]] = []
    for pk, prev_pk, next_pk in links:
        earlier = rows.get(across[pk]) if pk in across else None
        events[pk] = classify(rows[pk], rows.get(prev_pk) if prev_pk else None, prices, earlier=earlier)
        nxt = rows.get(next_pk) if next_pk else None
        if nxt is not None and nxt["pk"] not in chunk and nxt["analyzed_at"] is not None:
            events[nxt["pk"]] = classify(nxt, rows[pk], prices)
            successors.append(nxt)
    # One upsert, in primary-key order, so two workers lock rows in the same order.
    CacheEvent.objects.bulk_create(
        [events[pk] for pk in sorted(events)],
        update_conflicts=True,
        unique_fields=["call"],
        update_fields=EVENT_FIELDS,
    )
    return successors


def update_prefix_registry(newly_analysed: Iterable[Call]) -> None:
    """Count each newly analysed call in its prefix's registry entry.

    This one increments instead of recomputing (a popular prefix has millions of calls),
    and is still exactly-once: it runs in the transaction that sets the calls'
    analyzed_at under a row lock, so a redelivered task finds them analysed and adds
    nothing. first_seen/last_seen are a min and a max: repeating them changes nothing.
    """
    agg: dict[tuple[int, str], dict[str, Any]] = {}
    for c in newly_analysed:
        if not c.prefix_hash:
            continue
        key = (c.project_id, c.prefix_hash)
        entry = agg.get(key)
        if entry is None:
            agg[key] = {"first": c.started_at, "last": c.started_at, "calls": 1, "tokens": c.prefix_tokens,
                        "segments": c.prefix_segments}
        else:
            entry["first"] = min(entry["first"], c.started_at)
            entry["last"] = max(entry["last"], c.started_at)
            entry["calls"] += 1
    if not agg:
        return
    table = PrefixEntry._meta.db_table
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    sql = (
        f"INSERT INTO {table} (project_id, prefix_hash, first_seen, last_seen, calls, tokens, segments) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (project_id, prefix_hash) DO UPDATE SET "
        f"first_seen = {least}({table}.first_seen, excluded.first_seen), "
        f"last_seen = {greatest}({table}.last_seen, excluded.last_seen), "
        f"calls = {table}.calls + excluded.calls"
    )
    segments = PrefixEntry._meta.get_field("segments")
    when = connection.ops.adapt_datetimefield_value
    params = [
        (
            pid,
            h,
            when(e["first"]),
            when(e["last"]),
            e["calls"],
            e["tokens"],
            segments.get_db_prep_save(e["segments"], connection),
        )
        for (pid, h), e in sorted(agg.items())
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
