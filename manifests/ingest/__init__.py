"""The write path: a request body becomes stored calls.

- ``door``: decoding and validation of the body, item by item, with the JSON path of every bad field;
- ``dupkeys``: the fast proof that a manifest repeats no JSON key;
- ``store``: accepted, duplicate or rejected; the transaction, its retries, the hand-off to analysis;
- ``postgres`` and ``rows``: the rows and the statements that write them (``COPY`` on PostgreSQL);
- ``otlp``: OpenTelemetry GenAI spans mapped to manifests, then stored through ``store``.

Callers use the names below; the modules' other names are theirs.
"""

from manifests.ingest.door import BadRequest, decode, validate
from manifests.ingest.store import (
    ACCEPTED,
    DUPLICATE,
    REJECTED,
    Busy,
    IngestReport,
    ManifestResult,
    analysis_after_response,
    enqueue_analyses,
    ingest_body,
    ingest_manifests,
)

__all__ = [
    "ACCEPTED",
    "DUPLICATE",
    "REJECTED",
    "BadRequest",
    "Busy",
    "IngestReport",
    "ManifestResult",
    "analysis_after_response",
    "decode",
    "enqueue_analyses",
    "ingest_body",
    "ingest_manifests",
    "validate",
]
