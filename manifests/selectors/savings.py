"""What fixing each cause is worth (docs/analysis.md, "The saving of a fix").

Over the last seven days (whatever the page's range), per day: the cost units a cache fix
regains (ctxkit.figures.cache_saving of each miss, at its model's prices from the price
book, stored on the cache event by the analysis) and the same in USD (at the model's USD prices),
the calls and runs a fix concerns, and for missing evidence what the affected calls paid (their
cost in units and in USD, stored on their attributions by the analysis). Every read is bounded
by time: cache misses and missing evidence are read from one index each, and the first calls
from their own days' partitions on PostgreSQL, however large the tables grow.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce

from django.db.models import Count, F, Min, Q, QuerySet, Sum
from django.utils import timezone

from ctxkit import figures as ref_figures
from manifests import figures
from manifests.analysis.prices import PriceBook
from manifests.figures import MISSING_CAUSES
from manifests.models import Attribution, CacheEvent, Call, Compaction, Project, Regression, ReRead
from manifests.selectors.filters import Filters

SAVING_DAYS = 7
# A miss below the provider's minimum cacheable prefix could not have hit: nothing to fix.
NOT_FIXABLE = (CacheEvent.HIT, CacheEvent.BELOW_MINIMUM)
# The others, named so that the events' (project, cause, time) index serves a filter on them.
FIXABLE = tuple(cause for cause, _ in CacheEvent.CAUSES if cause not in NOT_FIXABLE)


@dataclass(frozen=True)
class Saving:
    """One fix and what it is worth per day over the last :data:`SAVING_DAYS` days.

    ``regained`` is the cost units a cache fix regains per day (None for missing evidence,
    which regains no tokens); ``affected_cost`` what the affected calls paid per day (missing
    evidence only); ``first_call_id`` the earliest call of the cause in the seven days. The ``_usd``
    twins are the same in US dollars, None when no call of the fix has a USD price."""

    kind: str  # "cache" or "evidence"
    cause: str
    label: str
    regained: float | None
    affected_cost: float | None
    calls: float
    runs: float
    first_call_id: str
    first_at: datetime
    regained_usd: float | None = None
    affected_cost_usd: float | None = None
    # Compactions only: per day, the tokens they took out, the re-read tokens they caused and the
    # difference (ctxkit.figures.net_saving), and the tool whose re-reads cost the most.
    saved_tokens: float = 0.0
    reread_tokens: float = 0.0
    net_tokens: float = 0.0
    reread_tool: str = ""
    trigger: str = ""

    @property
    def net_loss(self) -> bool:
        """A compaction that cost more in re-reads than it saved."""
        return self.kind == "compaction" and self.net_tokens < 0

    @property
    def order(self) -> tuple[float, float]:
        """The top-fixes order: cost regained first (what a fix returns for certain; for
        compactions their net saving), then calls."""
        return (-(self.regained or 0.0), -self.calls)


def saving_range(filters: Filters) -> tuple[datetime, datetime]:
    """The seven days that end when the page was read."""
    until = filters.as_of or timezone.now()
    return until - timedelta(days=SAVING_DAYS), until


def _misses(project: Project, filters: Filters, since: datetime, until: datetime) -> QuerySet[CacheEvent]:
    """The fixable misses of the seven days: their run, agent, model and saving are stored on
    the event, so they are read from one index without their calls."""
    qs = CacheEvent.objects.filter(project=project, cause__in=FIXABLE, started_at__gte=since, started_at__lt=until)
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.model:
        qs = qs.filter(model=filters.model)
    return qs


def _first_calls(rows: QuerySet[CacheEvent] | QuerySet[Attribution],
                 firsts: Mapping[str, datetime]) -> dict[str, tuple[str, datetime]]:
    """Per cause, the call id and time of its earliest call among ``rows`` (cache events or
    attributions, which copy their call's time), given that time: the rows from their index,
    then their calls, each from its own day's partition."""
    if not firsts:
        return {}
    at_first = reduce(operator.or_, (Q(cause=cause, started_at=at) for cause, at in firsts.items()))
    earliest: dict[str, tuple[datetime, int]] = {}
    for cause, at, call_pk in sorted(rows.filter(at_first).values_list("cause", "started_at", "call_id")):
        earliest.setdefault(cause, (at, call_pk))
    ids = dict(Call.objects.filter(pk__in=[pk for _, pk in earliest.values()],
                                   started_at__in={at for at, _ in earliest.values()}).values_list("pk", "call_id"))
    return {cause: (ids[pk], at) for cause, (at, pk) in earliest.items() if pk in ids}


def _per_day(total: float | int | None) -> float:
    return (total or 0) / SAVING_DAYS


def _usd_per_day(total: float | None) -> float | None:
    """A USD total per day; None when no row had a USD price (the sum of nulls)."""
    return None if total is None else total / SAVING_DAYS


def cache_causes(project: Project, filters: Filters) -> list[Saving]:
    """Per cache-miss cause: cost units regained per day, calls and runs per day."""
    since, until = saving_range(filters)
    misses = _misses(project, filters, since, until)
    labels = dict(CacheEvent.CAUSES)
    rows = list(misses.values("cause").annotate(
        saving=Sum("saving"), saving_usd=Sum("saving_usd"), calls=Count("*"), runs=Count("run", distinct=True),
        first_at=Min("started_at"),
    ).order_by("cause"))
    firsts = _first_calls(misses, {row["cause"]: row["first_at"] for row in rows})
    out = []
    for row in rows:
        first = firsts.get(row["cause"])
        if first is None:  # its misses were deleted since the aggregate (retention)
            continue
        out.append(Saving("cache", row["cause"], labels.get(row["cause"], row["cause"]), _per_day(row["saving"]),
                          None, _per_day(row["calls"]), _per_day(row["runs"]), *first,
                          regained_usd=_usd_per_day(row["saving_usd"])))
    out.sort(key=lambda s: s.order)
    return out


def regression_savings(project: Project, filters: Filters, regressions: Iterable[Regression]) -> dict[int, Saving]:
    """Per regression (by pk): the saving of the misses of its agent and model, of its cause
    (all fixable misses when its cause is not one), from its first bad call on."""
    since, until = saving_range(filters)
    out = {}
    for r in regressions:
        first = r.first_call or r.call
        misses = _misses(project, Filters(), max(since, first.started_at), until).filter(agent=r.agent, model=r.model)
        if r.cause in dict(CacheEvent.CAUSES) and r.cause not in NOT_FIXABLE:
            misses = misses.filter(cause=r.cause)
        totals = misses.aggregate(saving=Sum("saving"), saving_usd=Sum("saving_usd"), calls=Count("*"),
                                  runs=Count("run", distinct=True))
        out[r.pk] = Saving("regression", r.cause, f"{r.agent} · {r.model}", _per_day(totals["saving"]), None,
                           _per_day(totals["calls"]), _per_day(totals["runs"]), first.call_id, first.started_at,
                           regained_usd=_usd_per_day(totals["saving_usd"]))
    return out


def with_savings(project: Project, filters: Filters, regressions: list[Regression]) -> list[dict[str, object]]:
    """The regressions as rows of ``regression`` and its ``saving``, for the overview's list."""
    worth = regression_savings(project, filters, regressions)
    return [{"regression": r, "saving": worth[r.pk]} for r in regressions]


def _lost(project: Project, filters: Filters, since: datetime, until: datetime) -> QuerySet[Attribution]:
    """The missing-evidence attributions of the seven days: their call's run, agent, model and
    cost are stored on them, so they are read from one index without their calls."""
    qs = Attribution.objects.filter(project=project, cause__in=MISSING_CAUSES, started_at__gte=since,
                                    started_at__lt=until)
    if filters.agent:
        qs = qs.filter(agent=filters.agent)
    if filters.model:
        qs = qs.filter(model=filters.model)
    return qs


def evidence_causes(project: Project, filters: Filters) -> list[Saving]:
    """Per cause of missing evidence: the calls and runs it affected per day, and what
    those calls paid per day (each call once, however many of its evidence it lost: the
    call's cost is stored on its first attribution of each cause only)."""
    since, until = saving_range(filters)
    lost = _lost(project, filters, since, until)
    labels = dict(Attribution.CAUSES)
    # One aggregate per cause: each reads its own range of the index in order, where one
    # grouped over all causes would sort the seven days' rows first.
    rows = []
    for cause in MISSING_CAUSES:
        row = lost.filter(cause=cause).aggregate(cost=Sum("call_cost"), cost_usd=Sum("call_cost_usd"),
                                                 calls=Count("call_cost"),
                                                 runs=Count("run", distinct=True), first_at=Min("started_at"))
        if row["first_at"] is not None:
            rows.append({"cause": cause, **row})
    firsts = _first_calls(lost, {row["cause"]: row["first_at"] for row in rows})
    out = []
    for row in rows:
        first = firsts.get(row["cause"])
        if first is None:  # its calls were deleted since the aggregate (retention)
            continue
        out.append(Saving("evidence", row["cause"], labels.get(row["cause"], row["cause"]), None,
                          _per_day(row["cost"]), _per_day(row["calls"]), _per_day(row["runs"]), *first,
                          affected_cost_usd=_usd_per_day(row["cost_usd"])))
    out.sort(key=lambda s: s.order)
    return out


@dataclass
class _Compactions:
    """One group's totals over the seven days, as :func:`compaction_savings` adds them up."""

    saved: int = 0
    reread: int = 0
    units: float = 0.0
    usd: float | None = None
    count: int = 0
    runs: set[int] = field(default_factory=set)
    tools: Counter[str] = field(default_factory=Counter)
    first: tuple[bool, datetime, str] | None = None  # (without re-reads, time, call id): the least


def compaction_savings(project: Project, filters: Filters) -> list[Saving]:
    """Per agent, model, strategy and trigger: what its compactions saved net per day
    (ctxkit.figures.net_saving, in cost units and USD at each call's prices by
    ``net_saving_cost``), the tokens they took out and the re-read tokens they caused, the
    compactions and runs per day, the tool re-read the most, and the first compaction of the
    seven days that caused a re-read (else the first)."""
    since, until = saving_range(filters)
    rows = Compaction.objects.filter(project=project, started_at__gte=since, started_at__lt=until,
                                     call__started_at__gte=since, call__started_at__lt=until)
    if filters.agent:
        rows = rows.filter(call__agent=filters.agent)
    if filters.model:
        rows = rows.filter(call__model=filters.model)
    found = list(rows.annotate(reread=figures.compaction_reread_tokens()).annotate(
        net=figures.net_saving(reread=F("reread"))).values_list(
        "call_id", "event_id", "strategy", "trigger", "tokens_before", "tokens_after", "reread", "net",
        "started_at", "call__call_id", "call__run_id", "call__agent", "call__model", "call__provider",
        "call__input_tokens"))
    if not found:
        return []
    tools: dict[tuple[int, str], Counter[str]] = {}
    for call_pk, ref, tool, tokens in ReRead.objects.filter(
            project=project, cause="compaction", lost_call_id__in={r[0] for r in found if r[6]}).values_list(
            "lost_call_id", "cause_ref", "tool", "tokens"):
        tools.setdefault((call_pk, ref), Counter())[tool] += tokens
    book = PriceBook.load()
    groups: dict[tuple[str, str, str, str], _Compactions] = {}
    for (call_pk, ref, strategy, trigger, before, after, reread, net, at, call_id, run_pk, agent, model, provider,
         input_tokens) in found:
        group = groups.setdefault((agent, model, strategy, trigger), _Compactions())
        group.saved += before - after
        group.reread += reread
        group.count += 1
        group.runs.add(run_pk)
        group.tools.update(tools.get((call_pk, ref), Counter()))
        group.units += ref_figures.net_saving_cost(net, book.for_model(model).weights)
        usd = book.usd(model, provider, input_tokens, at)
        if usd is not None:
            group.usd = (group.usd or 0.0) + ref_figures.net_saving_cost(net, usd.weights)
        first = (not reread, at, call_id)
        group.first = first if group.first is None or first < group.first else group.first
    out = []
    for (agent, model, strategy, trigger), group in sorted(groups.items()):
        assert group.first is not None
        tool = group.tools.most_common(1)[0][0] if group.tools else ""
        out.append(Saving("compaction", f"{agent}|{model}|{strategy}|{trigger}",
                          f"{agent} · {model} · {strategy}" + (f" ({trigger})" if trigger else ""),
                          group.units / SAVING_DAYS, None, _per_day(group.count), _per_day(len(group.runs)),
                          group.first[2], group.first[1], regained_usd=_usd_per_day(group.usd),
                          saved_tokens=_per_day(group.saved), reread_tokens=_per_day(group.reread),
                          net_tokens=_per_day(ref_figures.net_saving(group.saved, 0, group.reread)),
                          reread_tool=tool, trigger=trigger))
    out.sort(key=lambda s: s.order)
    return out


def top_fixes(project: Project, filters: Filters, limit: int = 5) -> list[Saving]:
    """The overview's top fixes: cache-miss causes, causes of missing evidence and the
    compactions that caused re-reads (one that caused none has nothing to fix: the savings page
    lists it), by cost units regained per day (a compaction's net saving), then by calls affected
    per day. Compactions that cost more in re-reads than they saved rank last and are always listed."""
    compactions = [c for c in compaction_savings(project, filters) if c.reread_tokens]
    fixes = cache_causes(project, filters) + evidence_causes(project, filters) + compactions
    fixes.sort(key=lambda s: s.order)
    return fixes[:limit] + [f for f in fixes[limit:] if f.net_loss]

