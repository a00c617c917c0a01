"""Formatting filters for the dashboard templates."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def pct(value: float | None, digits: int = 0) -> str:
    """0.8123 -> '81%'; None -> '–'."""
    if value is None or value == "":
        return "–"
    return f"{float(value) * 100:.{int(digits)}f}%"


@register.filter
def figure(value: float | None, fmt: str) -> str:
    """A headline figure in its format: int, pct or num."""
    if value is None:
        return "–"
    if fmt == "pct":
        return pct(value, 1)
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
    return f"{value:+,.2f}"
