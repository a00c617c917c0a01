"""Formatting filters for the dashboard templates."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from ctxkit.models import format_usd

register = template.Library()


@register.filter
def pct(value: float | None, digits: int = 0) -> str:
    """0.8123 -> '81%'; None -> '–'."""
    if value is None or value == "":
        return "–"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def usd(value: float | None) -> str:
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
def sort_th(context, sort, column: str, label: str, numeric: bool = False, first: str = "") -> str:
    """A sortable column header: a link that sorts by ``column`` (the other direction when it
    already does), with ``aria-sort`` on the sorted one. The link keeps every other query
    parameter but the page number. ``first`` is the direction of a first click
    (numbers and times: descending; text: ascending)."""
    query = context["request"].GET.copy()
    query.pop("page", None)
    descending_first = (first or ("desc" if numeric else "asc")) == "desc"
    active = sort is not None and sort.column == column
    if active:
        descending = not sort.descending
    else:
        descending = descending_first
    query["sort"] = f"-{column}" if descending else column
    aria = ("descending" if sort.descending else "ascending") if active else "none"
    arrow = ("▼" if sort.descending else "▲") if active else "↕"
    return format_html(
        '<th scope="col" class="sortable{}" aria-sort="{}"><a href="?{}" data-sort="{}">{}'
        '<span class="sort-arrow" aria-hidden="true"> {}</span></a></th>',
        " num" if numeric else "", aria, query.urlencode(), column, label, arrow,
    )


@register.filter
def split(value: str) -> list[str]:
    """"calls items evidence"|split -> a list, for a loop over fixed names in a template."""
    return str(value).split()
