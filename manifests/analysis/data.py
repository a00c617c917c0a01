"""Load what the analysis of a chunk of calls needs, in a few queries.

The stored raw manifest is the analysis' source: decoding it with msgspec is far
cheaper than reading thousands of item rows through the ORM, and it is what makes
re-analysis possible when the rules change. Only the primary keys of evidence and
compaction rows (which derived rows point at) come from their tables.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ctxkit import figures
from ctxkit.manifest import Manifest, decode_manifest
from manifests.models import Call, Compaction, Evidence
from manifests.storage import partitions


@dataclass
class CallData:
    call: Call
    manifest: Manifest
    evidence_pks: list[int | None] = field(default_factory=list)
    compaction_pks: list[int | None] = field(default_factory=list)

    @property
    def cited_keys(self) -> set[str] | None:
        """Evidence keys the answer's claims rest on; None when no claims were sent."""
        return figures.cited_keys(self.manifest)


def _match(keys_in_manifest: list[str], rows: list[tuple[int, str]]) -> list[int | None]:
    """Pair the manifest's entries with their rows: in order when the keys agree (ingest
    writes them in manifest order), else by key and occurrence."""
    if [k for _, k in rows] == keys_in_manifest:
        return [pk for pk, _ in rows]
    pool: dict[str, list[int]] = defaultdict(list)
    for pk, key in rows:
        pool[key].append(pk)
    return [pool[key].pop(0) if pool.get(key) else None for key in keys_in_manifest]


def load(calls: list[Call]) -> list[CallData]:
    pks = [c.pk for c in calls]
    days = partitions.span(c.started_at for c in calls)  # only these calls' days' partitions
    evidence_rows: dict[int, list[tuple[int, str]]] = defaultdict(list)
    # The manifest's own entries; the watched facts' (``watched``) are the analysis' own, facts.py.
    for call_pk, pk, key in Evidence.objects.filter(call_id__in=pks, watched=False, **days).order_by(
        "call_id", "pk").values_list(
        "call_id", "pk", "key"
    ):
        evidence_rows[call_pk].append((pk, key))
    compaction_rows: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for call_pk, pk, event_id in (
        Compaction.objects.filter(call_id__in=pks, **days)
        .order_by("call_id", "pk")
        .values_list("call_id", "pk", "event_id")
    ):
        compaction_rows[call_pk].append((pk, event_id))

    out: list[CallData] = []
    for call in calls:
        manifest = decode_manifest(call.raw.encode())
        out.append(
            CallData(
                call=call,
                manifest=manifest,
                evidence_pks=_match([e.key for e in manifest.evidence], evidence_rows[call.pk]),
                compaction_pks=_match([c.id for c in manifest.compactions], compaction_rows[call.pk]),
            )
        )
    return out


def clean(value: str | None) -> str:
    """PostgreSQL text cannot hold NUL: the raw manifest may (escaped in its JSON), so text
    copied from it into derived rows is cleaned the way ingest cleans it."""
    if not value:
        return ""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value
