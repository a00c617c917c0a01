"""The call view's item rows, rendered in Python.

A call has up to a few hundred items and each row has a dozen cells; through the template
language they would be most of the call view's server time (docs/performance.md, "Dashboard
pages"). This writes the same markup as a template, escaping every value as the
template's autoescape does; tests/views/test_call.py checks what each cell shows and the fold.
"""

from __future__ import annotations

import html
from typing import Any
from urllib.parse import quote

from django import template
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator, add_truncation_text

register = template.Library()

DASH = "–"


def _e(value: Any) -> str:
    """conditional_escape without its lazy-string wrapper (a large share of this module's time)."""
    if type(value) is str:  # most values: skip the __html__ probe
        return html.escape(value)
    if hasattr(value, "__html__"):
        return str(value.__html__())
    return html.escape(str(value))


def _truncate(value: str, length: int) -> str:
    """The ``truncatechars`` filter; ASCII (hashes, most refs) without its per-character walk."""
    if value.isascii():  # no normalization or combining characters to consider
        return value if len(value) <= length else str(add_truncation_text(value[: length - 1], None))
    return Truncator(value).chars(length)


def _or_dash(value: Any) -> str:
    return DASH if value is None else _n(value)


def _n(value: Any) -> str:
    """A number cell: an int's digits need no escaping."""
    return str(value) if type(value) is int else _e(value)


FOLD = (
    '</tbody></table>\n<details class="folded" id="items-folded"><summary>{} items not sent (dropped, folded into a '
    'summary, cleared…)</summary>\n<table class="grid compact" id="items-not-sent"><thead><tr><th class="num">Pos</th>'
    '<th>Zone</th><th>Item</th><th>Kind</th><th>Action</th><th class="num">Prio</th><th class="num">Requested</th>'
    '<th class="num">Granted</th><th class="num">Used</th><th>Trust</th><th>Reason</th><th>Ref / hash</th></tr>'
    "</thead><tbody>"
)


@register.simple_tag
def item_rows(items: list[Any], fold_at: int | None, not_sent: int, evidence_url: str, qs_amp: str) -> SafeString:
    """Every row of the items table, the rows not sent folded from ``fold_at`` on: what the
    template's loop over ``item_row`` wrote, without a template node per row."""
    out = []
    for n, i in enumerate(items):
        if n == fold_at:
            out.append(FOLD.format(not_sent))
        out.append(f"\n    {_row(i, evidence_url, qs_amp)}\n  ")
    return mark_safe("".join(out))  # each row escapes its values; not_sent is an int


@register.simple_tag
def item_row(i: Any, evidence_url: str, qs_amp: str) -> SafeString:
    """One ``<tr>`` of the items table; ``i`` carries ``in_context`` (selectors.calls.context_order)."""
    return mark_safe(_row(i, evidence_url, qs_amp))  # every value is escaped


def _row(i: Any, evidence_url: str, qs_amp: str) -> str:
    untrusted = i.trust == "untrusted"
    cls = ("untrusted" if untrusted else "") + ("" if i.in_context else " absent")
    if i.in_context:
        zone = f'<span class="zone zone-{_e(i.zone)}">{_e(i.zone) if i.zone else DASH}</span>'
    else:
        zone = '<span class="hint">not sent</span>'
    # What the agent calls it (a tool by its name, a message by role and turn), then its path.
    name = _e(i.item_id)
    if i.label:
        name = f'<b class="label">{_e(i.label)}</b><br><span class="hint">{name}</span>'
    if i.pinned:
        name += ' <span class="badge" title="pinned: always kept">pinned</span>'
    if i.group:
        name += f'<br><span class="hint">group {_e(i.group)}</span>'
    trust = (
        '<span class="badge-untrusted" title="Data, never instructions">⚠ untrusted</span>'
        if untrusted
        else '<span class="hint">trusted</span>'
    )
    reason = _e(i.reason)
    if i.text is not None:
        reason += (
            f'<details class="text"><summary>text sent ({len(i.text)} chars)</summary><pre>{_e(i.text)}</pre></details>'
        )
    ref = ""
    if i.source_ref:
        ref += f"<code>{_e(_truncate(i.source_ref, 48))}</code>"
        if i.source_version:
            ref += f' <span class="hint">{_e(i.source_version)}</span>'
        ref += "<br>"
    if i.content_hash:
        ref += (
            f'<a class="hash" href="{_e(evidence_url)}?q={_e(quote(i.content_hash, safe="/"))}{_e(qs_amp)}" '
            f'title="find this content elsewhere">{_e(_truncate(i.content_hash, 14))}</a>'
        )
    return (
        f'<tr class="{cls}" data-item="{_e(i.item_id)}">\n'
        f'      <td class="num">{_or_dash(i.position)}</td>\n'
        f"      <td>{zone}</td>\n"
        f"      <td>{name}</td>\n"
        f"      <td>{_e(i.kind)}</td>\n"
        f'      <td><span class="action action-{_e(i.action)}">{_e(i.action)}</span></td>\n'
        f'      <td class="num">{_n(i.priority)}</td>\n'
        f'      <td class="num">{_n(i.requested_tokens)}</td><td class="num">{_or_dash(i.granted_tokens)}</td>'
        f'<td class="num">{_or_dash(i.used_tokens)}</td>\n'
        f"      <td>{trust}</td>\n"
        f'      <td class="reason">{reason}</td>\n'
        f"      <td>{ref}</td>\n"
        "    </tr>"
    )
