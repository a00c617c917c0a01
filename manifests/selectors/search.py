"""The top bar's search: one box for a run id, a call id, an evidence key, a source ref, an
item's content hash or a prefix hash, whole or by its beginning.

Search ignores the time range on purpose: an id pasted from a log must be found whenever
its call happened. Exact matches come first; a single exact match (or a single match of
any kind) is where the box goes straight to.

One exception, so that the box never scans the items table: source refs (free text with no
index) are looked for only among the items of the latest ``REF_SCAN_CALLS`` calls of the
selected time range (and agent / model): what is read is bounded whatever the table holds.
The results page says so (docs/dashboard.md, "Find, click through, compare, export").
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.urls import reverse

from manifests.models import Call, Evidence, Item, Project, Run
from manifests.selectors.filters import Filters

MAX_QUERY = 200
PER_KIND = 10
MIN_HASH_PREFIX = 4  # shorter beginnings of a hex hash match nearly everything
REF_SCAN_CALLS = 500  # source refs: the items of at most this many calls (about 100 items each)


@dataclass(frozen=True)
class Match:
    kind: str  # run, call, evidence, ref, content hash, prefix hash
    value: str
    detail: str
    url: str
    exact: bool


HEX = "0123456789abcdef"


def _begins(field: str, query: str) -> dict[str, str]:
    return {f"{field}__startswith": query}


def hex_begins(field: str, prefix: str) -> dict[str, str]:
    """A hex prefix as an index range (``>= "ab9"`` and ``< "aba"``) plus the exact test: LIKE
    alone scans the table on SQLite and under PostgreSQL's non-C collations; the range uses
    the (project, hash) index, and the next hex digit bounds it under any collation."""
    last = prefix[-1]
    upper = prefix[:-1] + ("g" if last == "f" else HEX[HEX.index(last) + 1])
    return {f"{field}__gte": prefix, f"{field}__lt": upper, f"{field}__startswith": prefix}


def _recent_refs(project: Project, filters: Filters, query: str) -> list[str]:
    """Source refs beginning with ``query`` among the items of the range's latest calls."""
    recent = list(filters.apply(Call.objects.filter(project=project)).order_by("-started_at", "-pk")
                  .values_list("pk", "started_at")[:REF_SCAN_CALLS])
    if not recent:
        return []
    # The calls' time bounds the item partitions read; the call ids the rows (item_call_ordinal).
    items = Item.objects.filter(project=project, call_id__in=[pk for pk, _ in recent],
                                started_at__gte=min(at for _, at in recent),
                                started_at__lte=max(at for _, at in recent))
    refs = (items.filter(**_begins("source_ref", query)).values_list("source_ref", flat=True)
            .distinct().order_by("source_ref")[:PER_KIND])
    return [ref for ref in refs if ref is not None]  # none is: each begins with the query


def find(project: Project, query: str, filters: Filters | None = None) -> list[Match]:
    """``filters`` bound the source-ref scan only (the module's docstring); None: no time bound
    (still the latest ``REF_SCAN_CALLS`` calls)."""
    query = query.strip()[:MAX_QUERY]
    if not query:
        return []
    slug = project.slug
    everything = urlencode({"range": "all"})
    out: list[Match] = []

    for run in Run.objects.filter(project=project, **_begins("run_id", query)).order_by("-last_seen")[:PER_KIND]:
        out.append(Match("run", run.run_id, f"{run.agent} · last call {run.last_seen:%Y-%m-%d %H:%M}",
                         reverse("run-detail", args=[slug, run.run_id]), run.run_id == query))

    for call in (Call.objects.filter(project=project, **_begins("call_id", query))
                 .only("call_id", "step", "agent", "started_at", "run__run_id").select_related("run")
                 .order_by("-started_at")[:PER_KIND]):
        out.append(Match("call", call.call_id, f"step {call.step} of {call.run.run_id} · {call.agent}",
                         reverse("call-detail", args=[slug, call.call_id]), call.call_id == query))

    evidence_url = reverse("evidence", args=[slug])
    keys = (Evidence.objects.filter(project=project, **_begins("key", query)).values_list("key", flat=True)
            .distinct().order_by("key")[:PER_KIND])
    for key in keys:
        out.append(Match("evidence", key, "evidence key: its timeline and the runs where it was missing",
                         f"{evidence_url}?{urlencode({'key': key, 'range': 'all'})}", key == query))

    # Source refs have no index (they are free text of any length): searched only when no run,
    # call or evidence key matched exactly, which is what a pasted id usually is, and only in
    # the latest calls of the range.
    if not any(m.exact for m in out):
        for ref in _recent_refs(project, filters or Filters(), query):
            out.append(Match("ref", ref, "source ref: the items that came from it",
                             f"{evidence_url}?{urlencode({'q': ref, 'range': 'all'})}", ref == query))

    hex_query = query.lower()
    if len(hex_query) >= MIN_HASH_PREFIX and all(c in HEX for c in hex_query):
        hashes = (Item.objects.filter(project=project, **hex_begins("content_hash", hex_query))
                  .values_list("content_hash", flat=True).distinct().order_by("content_hash")[:PER_KIND])
        for h in hashes:
            if h is None:  # none is: each begins with the query
                continue
            out.append(Match("content hash", h, "item content hash: the items with this content",
                             f"{evidence_url}?{urlencode({'q': h, 'range': 'all'})}", h == hex_query))
        calls_url = reverse("calls", args=[slug])
        prefixes = (Call.objects.filter(project=project, **hex_begins("prefix_hash", hex_query))
                    .values_list("prefix_hash", flat=True).distinct().order_by("prefix_hash")[:PER_KIND])
        for h in prefixes:
            out.append(Match("prefix hash", h, "prefix hash: the calls sent with this prefix",
                             f"{calls_url}?{urlencode({'prefix': h})}&{everything}", h == hex_query))
    out.sort(key=lambda m: not m.exact)  # stable: exact first, kinds in the order above
    return out


def destination(matches: list[Match]) -> str | None:
    """Where to go straight to: the only exact match, else the only match; None when ambiguous."""
    exact = [m for m in matches if m.exact]
    if len(exact) == 1:
        return exact[0].url
    if not exact and len(matches) == 1:
        return matches[0].url
    return None
