"""``{% prefix_line_diff before_segments after_segments %}``: the lines that differ between two
prefixes, rendered by the one partial templates/manifests/_prefix_line_diff.html."""

from __future__ import annotations

from typing import Any

from django import template

from manifests.selectors.prefix_lines import line_diff

register = template.Library()


@register.inclusion_tag("manifests/_prefix_line_diff.html")
def prefix_line_diff(before: list[dict[str, Any]] | None, after: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"line_diff": line_diff(before, after)}
