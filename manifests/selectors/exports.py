"""Rows for the CSV / JSONL exports: the calls, items and evidence the current filters select.

Read with ``values_list(...).iterator()`` so an export of a million items streams in
constant memory; columns are named once here for both formats.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from manifests.models import Attribution, Evidence, Item, Project
from manifests.selectors.call_list import CallQuery, calls
from manifests.selectors.filters import Filters, M, bound_call

CHUNK = 2000

# (column, field) per kind. Figures come from CallFigures, their one definition.
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "calls": [
        ("call_id", "call_id"), ("run_id", "run__run_id"), ("step", "step"), ("agent", "agent"),
        ("model", "model"), ("provider", "provider"), ("started_at", "started_at"), ("window", "window"),
        ("output_reserve", "output_reserve"), ("input_cap", "input_cap"), ("input_tokens", "input_tokens"),
        ("cache_read_tokens", "cache_read_tokens"), ("cache_write_tokens", "cache_write_tokens"),
        ("cache_write_1h_tokens", "cache_write_1h_tokens"),
        ("uncached_input_tokens", "figures__uncached_input_tokens"), ("output_tokens", "output_tokens"),
        ("cache_hit_ratio", "figures__cache_hit_ratio"), ("context_tokens", "figures__context_tokens"),
        ("cost", "figures__cost"), ("cost_usd", "figures__cost_usd"), ("prefix_hash", "prefix_hash"),
        ("prefix_tokens", "prefix_tokens"),
        ("cache_cause", "cache_event__cause"), ("items", "item_count"), ("evidence", "evidence_count"),
        ("evidence_missing", "evidence_missing"), ("status", "status"), ("verified", "verified"),
    ],
    "items": [
        ("call_id", "call__call_id"), ("run_id", "call__run__run_id"), ("step", "call__step"),
        ("item_id", "item_id"), ("kind", "kind"), ("action", "action"), ("zone", "zone"),
        ("position", "position"), ("requested_tokens", "requested_tokens"), ("granted_tokens", "granted_tokens"),
        ("used_tokens", "used_tokens"), ("priority", "priority"), ("pinned", "pinned"), ("trust", "trust"),
        ("group", "group"), ("source_ref", "source_ref"), ("content_hash", "content_hash"), ("reason", "reason"),
    ],
    "evidence": [
        ("call_id", "call__call_id"), ("run_id", "call__run__run_id"), ("step", "call__step"), ("key", "key"),
        ("label", "label"), ("present", "present"), ("found_in", "found_in"), ("used", "used"),
        ("expected_item", "expected_item"), ("cause", "cause"),
    ],
}
KINDS = tuple(COLUMNS)


def header(kind: str) -> list[str]:
    return [c for c, _ in COLUMNS[kind]]


def rows(project: Project, filters: Filters, cq: CallQuery, kind: str) -> Iterator[tuple[Any, ...]]:
    """The rows of one export, in a stable order (time, then manifest order)."""
    selected = calls(project, filters, cq)
    names = [f for _, f in COLUMNS[kind]]
    qs: QuerySet[Any]  # calls, items or evidence: each export its own model
    if kind == "calls":
        qs = selected.order_by("started_at", "pk")
    elif kind == "items":
        qs = _in_range(Item.objects.filter(call__in=selected.values("pk")), filters).order_by(
            "started_at", "call_id", "ordinal")
    else:
        # The cause of a missing evidence (not the middle-zone risk flag), from the analysis.
        cause = Attribution.objects.filter(evidence=OuterRef("pk"), is_risk=False).values("cause")[:1]
        evidence = _in_range(Evidence.objects.filter(call__in=selected.values("pk")), filters)
        qs = evidence.annotate(cause=Subquery(cause)).order_by("started_at", "call_id", "pk")
    return qs.values_list(*names).iterator(chunk_size=CHUNK)


def _in_range(qs: QuerySet[M], filters: Filters) -> QuerySet[M]:
    """Children of the selected calls, bounded by the range on their own time (a copy of their
    call's) and on the call they join: PostgreSQL then reads the range's days' partitions
    only, not every day's (the call ids alone, from a subquery, prune nothing). Ordered by
    that time, which is their call's: the same order as by the call's time."""
    return bound_call(replace(filters, agent="", model="").apply(qs), filters)
