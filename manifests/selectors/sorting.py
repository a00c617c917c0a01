"""Server-side table sorting: ``?sort=<column>`` or ``?sort=-<column>`` (descending).

Each table names its sortable columns and the ordering each one stands for; an unknown
column is a :class:`FilterError` (a 400 naming ``sort``), never a silent fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db.models import F, OrderBy

from manifests.selectors.filters import FilterError

Row = TypeVar("Row")


@dataclass(frozen=True)
class Sort:
    column: str
    descending: bool

    @property
    def param(self) -> str:
        return f"-{self.column}" if self.descending else self.column

    def order_by(self, columns: Mapping[str, str], tiebreak: str = "pk",
                 nullable: Collection[str] | None = None) -> list[OrderBy | str]:
        """``order_by`` arguments; NULLs sort last in either direction on every database.

        ``nullable`` names the columns that can be NULL (all of them when not given): the
        others are ordered without NULLS LAST, which a plain b-tree index can serve on
        PostgreSQL (its DESC order puts NULLs first), so the first page is read from the
        index instead of sorting the whole range."""
        field = columns[self.column]
        if nullable is None or self.column in nullable:
            expr = F(field).desc(nulls_last=True) if self.descending else F(field).asc(nulls_last=True)
        else:
            expr = F(field).desc() if self.descending else F(field).asc()
        return [expr, f"-{tiebreak}" if self.descending else tiebreak]


def parse_sort(raw: str | None, columns: Mapping[str, object], default: str) -> Sort:
    raw = (raw or "").strip() or default
    descending = raw.startswith("-")
    column = raw.lstrip("-")
    if column not in columns:
        raise FilterError("sort", f"{column!r} is not one of {', '.join(columns)}")
    return Sort(column, descending)


def sort_list(rows: list[Row], sort: Sort, getters: Mapping[str, Callable[[Row], Any]]) -> list[Row]:
    """Sort rows already in memory (a run's steps) by ``getters[sort.column](row)``;
    rows without a value go last whichever the direction."""
    get = getters[sort.column]
    present = [r for r in rows if get(r) is not None]
    absent = [r for r in rows if get(r) is None]
    return sorted(present, key=get, reverse=sort.descending) + absent
