"""The allocator's budget arithmetic: water-filling by priority, and all-or-nothing ``drop`` segments.

Used by :mod:`ctxkit.context.allocator` (its docstring, steps 5 and 6, states the rules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctxkit.context.allocator.types import Allocation


def order_key(a: Allocation) -> tuple[int, str]:
    return (-a.effective_priority, a.name)


def share(pool: int, others: list[Allocation]) -> None:
    """Water-fill ``pool`` over the segments' remaining needs by effective priority.

    Segments of positive priority share first, by weight; what they leave goes to the others in
    equal parts. Within a group, needs are met in order of need per weight (ties: higher priority,
    then name) while they are below the level; the rest get the level's share, and the tokens the
    integer shares leave go one each in :func:`order_key` order. ``others`` is in that order (the
    allocator's are), so a stable sort by need per weight alone breaks its ties by it."""
    weighted = [a for a in others if a.requested > a.granted and a.effective_priority > 0]
    unweighted = [a for a in others if a.requested > a.granted and a.effective_priority <= 0]
    for group, equal in ((weighted, False), (unweighted, True)):
        if pool <= 0 or not group:
            continue
        needs = [a.requested - a.granted for a in group]
        if sum(needs) <= pool:  # every need fits
            for a, need in zip(group, needs, strict=True):
                a.granted += need
            pool -= sum(needs)
            continue
        weights = [1] * len(group) if equal else [a.effective_priority for a in group]
        level_pool, level_weight = pool, sum(weights)
        by_ratio = sorted(range(len(group)), key=lambda i: needs[i] / weights[i])
        unsaturated: list[int] = []
        for rank, i in enumerate(by_ratio):
            if needs[i] * level_weight <= level_pool * weights[i]:  # capped below its share
                group[i].granted += needs[i]
                level_pool -= needs[i]
                level_weight -= weights[i]
            else:
                unsaturated = by_ratio[rank:]
                break
        handed = 0
        for i in unsaturated:
            add = level_pool * weights[i] // level_weight
            group[i].granted += add
            handed += add
        rest = level_pool - handed  # < len(unsaturated): one token each, in priority order (group's)
        for i in sorted(unsaturated)[:rest]:
            group[i].granted += 1
        pool = 0 if unsaturated else level_pool


def whole_or_nothing(others: list[Allocation]) -> None:
    """Give ``drop`` segments (all or nothing) their whole need or nothing, wasting no budget.

    A proportional share below a drop segment's need buys nothing: many equal-priority small
    segments can each get a bit too little and all be dropped with the budget unused. The
    grants of those segments are pooled, the segments granted whole from the pool in
    ``(-effective_priority, name)`` order while they fit (skipping one that does not), and what
    is left water-fills the segments that can shrink. Budget the shares gave to other segments
    is never taken back for this. ``others`` is in that order.
    """
    short = [a for a in others if a.policy == "drop" and a.granted < a.requested]
    pool = sum(a.granted for a in short)
    if not short or not pool:
        return
    for a in short:
        a.granted = 0
    for a in short:
        if a.requested <= pool:
            a.granted = a.requested
            pool -= a.requested
    share(pool, [a for a in others if a.policy != "drop"])
