"""Formatting filters for the dashboard templates."""

from __future__ import annotations

import re

from django import template
from django.template import Context
from django.utils.html import format_html

from ctxkit.models import format_usd
from manifests.selectors.sorting import Sort

register = template.Library()


@register.filter
def pct(value: float | str | None, digits: int = 0) -> str:
    """0.8123 -> '81%'; None (or a template's empty string) -> '–'."""
    if value is None or value == "":
        return "–"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def usd(value: float | str | None) -> str:
    """ctxkit.models.format_usd of a figure; '–' when there is none (no USD price)."""
    return "–" if value is None or value == "" else format_usd(float(value))


@register.filter
def figure(value: float | None, fmt: str) -> str:
    """A headline figure in its format: int, pct, usd or num."""
    if value is None:
        return "–"
    if fmt == "pct":
        return pct(value, 1)
    if fmt == "usd":
        return usd(value)
    if fmt == "int":
        return f"{int(value):,}"
    return f"{float(value):,.2f}"


@register.filter
def delta(value: float | None, fmt: str) -> str:
    """A change against the previous period, signed: +3, -4.2 pt, +0.35."""
    if value is None:
        return ""
    if fmt == "pct":
        return f"{value * 100:+.1f} pt"
    if fmt == "int":
        return f"{int(value):+,}"
    if fmt == "usd":
        return ("+" if value >= 0 else "") + usd(value)
    return f"{value:+,.2f}"


@register.simple_tag(takes_context=True)
def sort_th(
    context: Context, sort: Sort | None, column: str, label: str, numeric: bool = False, first: str = ""
) -> str:
    """A sortable column header: a link that sorts by ``column`` (the other direction when it
    already does), with ``aria-sort`` on the sorted one. The link keeps every other query
    parameter but the page number. ``first`` is the direction of a first click
    (numbers and times: descending; text: ascending)."""
    query = context["request"].GET.copy()
    query.pop("page", None)
    descending_first = (first or ("desc" if numeric else "asc")) == "desc"
    active = sort if sort is not None and sort.column == column else None  # the sort, when by this column
    descending = not active.descending if active is not None else descending_first
    query["sort"] = f"-{column}" if descending else column
    aria = ("descending" if active.descending else "ascending") if active is not None else "none"
    arrow = ("▼" if active.descending else "▲") if active is not None else "↕"
    return format_html(
        '<th scope="col" class="sortable{}" aria-sort="{}"><a href="?{}" data-sort="{}">{}'
        '<span class="sort-arrow" aria-hidden="true"> {}</span></a></th>',
        " num" if numeric else "", aria, query.urlencode(), column, label, arrow,
    )


@register.filter
def short_path(value: str, parts: int = 2) -> str:
    """A folder by its last ``parts`` names ("/home/dev/src/ctxview" -> "…/src/ctxview"), as a
    runs list has room for; the full path goes in the cell's title."""
    text = str(value)
    names = [n for n in re.split(r"[/\\]", text) if n]
    if len(names) <= parts:
        return text
    return "…/" + "/".join(names[-parts:])


@register.filter
def split(value: str) -> list[str]:
    """"calls items evidence"|split -> a list, for a loop over fixed names in a template."""
    return str(value).split()
