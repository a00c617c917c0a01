"""Ingestion's rows and the statements that write them: the content hash, the runs' upsert, a call's, its items' and its
evidence's column values, the generic insert (binary ``COPY`` on PostgreSQL, ``bulk_create``
on SQLite), the calls' other children, and the idempotency registry's rows on SQLite.
``store`` and ``postgres`` decide what to write and when.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, overload

import msgspec
from django.db import connection

from ctxkit import figures
from ctxkit.manifest import Manifest
from manifests.figures import ITEM_FIELDS
from manifests.models import CallKey, Compaction, ContextEdit, Evidence, Invariant, Project, Run


def digest(canonical: bytes) -> str:
    return hashlib.sha256(canonical).hexdigest()


def workspaces(manifests: list[Manifest]) -> dict[str, tuple[str, str]]:
    """Each run's workspace in the batch: the first non-empty cwd and branch its calls give."""
    places: dict[str, tuple[str, str]] = {}
    for m in manifests:
        if m.workspace is not None:
            run_id = clean_text(m.run_id)
            cwd, branch = places.get(run_id, ("", ""))
            places[run_id] = (cwd or m.workspace.cwd, branch or m.workspace.git_branch)
    return places


def fill_workspaces(project: Project, manifests: list[Manifest]) -> None:
    """Fill the empty cwd or branch of the runs of calls stored already from these copies of
    them (recorded again: a Codex call captured by the proxy, whose requests name no branch, and
    imported from its rollout, which does), as the upsert fills them: never replacing one."""
    for run_id, (cwd, branch) in sorted(workspaces(manifests).items()):
        runs = Run.objects.filter(project=project, run_id=run_id)
        if cwd:
            runs.filter(cwd="").update(cwd=cwd)
        if branch:
            runs.filter(git_branch="").update(git_branch=branch)


def upsert_runs(project: Project, manifests: list[Manifest]) -> dict[str, int]:
    """Create the batch's missing runs and widen the others' time span (``runs_statement``).
    Returns {run_id: pk}."""
    sql, params = runs_statement(project, manifests)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return dict(cursor.fetchall())


def runs_statement(project: Project, manifests: list[Manifest]) -> tuple[str, list[Any]]:
    """The runs' upsert: create the batch's missing runs and widen the others' time span, in
    one statement.

    ``INSERT ... ON CONFLICT DO UPDATE`` with LEAST/GREATEST (MIN/MAX on SQLite): the
    database widens ``first_seen``/``last_seen`` against the row's current values, under
    its row lock, so two concurrent batches can never overwrite each other's times (a
    read-then-write would), and rows are written in run_id order, so two batches
    sharing runs lock them in the same order and cannot deadlock. A run's agent, model
    and parent are those of the first batch that created it. Its workspace's cwd and branch
    are each the first non-empty one that arrived: a later call fills an empty one and never
    replaces one (a branch switched mid-session keeps the run under the branch it began on).
    It returns (run_id, id) rows.
    """
    bounds: dict[str, tuple[datetime, datetime, Manifest]] = {}
    places = workspaces(manifests)
    for m in manifests:
        run_id = clean_text(m.run_id)
        first, last, sample = bounds.get(run_id, (m.started_at, m.started_at, m))
        bounds[run_id] = (min(first, m.started_at), max(last, m.started_at), sample)
    table = Run._meta.db_table
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == "postgresql" else ("MIN", "MAX")
    when = connection.ops.adapt_datetimefield_value
    rows = sorted(bounds.items())
    placeholders = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
    params: list[Any] = []
    for run_id, (first, last, sample) in rows:
        cwd, branch = places.get(run_id, ("", ""))
        params += [
            project.pk,
            run_id,
            clean_text(sample.agent),
            clean_text(sample.model),
            clean_text(sample.parent_run_id),
            when(first),
            when(last),
            cwd,  # the schema's NO_CONTROL pattern keeps NUL out of both
            branch,
        ]
    sql = (
        f"INSERT INTO {table} (project_id, run_id, agent, model, parent_run_id, first_seen, last_seen, cwd, "
        f"git_branch) VALUES {placeholders} ON CONFLICT (project_id, run_id) DO UPDATE SET "
        f"first_seen = {least}({table}.first_seen, excluded.first_seen), "
        f"last_seen = {greatest}({table}.last_seen, excluded.last_seen), "
        f"cwd = CASE WHEN {table}.cwd = '' THEN excluded.cwd ELSE {table}.cwd END, "
        f"git_branch = CASE WHEN {table}.git_branch = '' THEN excluded.git_branch ELSE {table}.git_branch END "
        "RETURNING run_id, id"
    )
    return sql, params


@overload
def clean_text(value: str) -> str: ...
@overload
def clean_text(value: None) -> None: ...
@overload
def clean_text(value: str | None) -> str | None: ...


def clean_text(value: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL; keep the rest of hostile text as data."""
    if value is not None and "\x00" in value:
        return value.replace("\x00", "\ufffd")
    return value


def call_row(
    project: Project, run_pk: int, m: Manifest, canonical: bytes, digest: str, now: datetime
) -> dict[str, Any]:
    """A call's column values by attribute name (``insert_rows`` fills in the model's other defaults)."""
    usage = m.usage
    outcome = m.outcome
    prefix = m.prefix
    return dict(
        project_id=project.pk,
        run_id=run_pk,
        call_id=clean_text(m.call_id),
        step=m.step,
        parent_call_id=clean_text(m.parent_call_id),
        agent=clean_text(m.agent),
        model=clean_text(m.model),
        provider=clean_text(m.provider),
        started_at=m.started_at,
        ended_at=m.ended_at,
        builder_name=clean_text(m.builder.name) if m.builder else "",
        builder_version=clean_text(m.builder.version) if m.builder else "",
        window=m.budget.window,
        output_reserve=m.budget.output_reserve,
        safety_margin=m.budget.safety_margin,
        input_cap=figures.budget_input_cap(m.budget),
        prefix_hash=clean_text(prefix.hash) if prefix else "",
        prefix_tokens=prefix.tokens if prefix else 0,
        prefix_segments=msgspec.to_builtins(prefix.segments) if prefix else [],
        cache_ttl_seconds=m.cache_ttl_seconds,
        input_tokens=usage.input_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cache_write_1h_tokens=usage.cache_write_1h_tokens,
        output_tokens=usage.output_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        status=clean_text(outcome.status) if outcome else "",
        finish_reason=clean_text(outcome.finish_reason or "") if outcome else "",
        verified=outcome.verified if outcome else "unknown",
        item_count=len(m.items),
        evidence_count=len(m.evidence),
        evidence_missing=sum(1 for e in m.evidence if not e.present),
        warnings=[clean_text(w) for w in m.warnings],
        content_hash=digest,
        # Stored as text: the canonical bytes re-encoded by msgspec, so any "\u0000"
        # stays escaped and the column never holds a raw NUL.
        raw=canonical.decode(),
        received_at=now,
    )


# The call, the project and the manifest order, then an item's stored fields (written once).
ITEM_COLUMNS = ("call_id", "project_id", "ordinal", *ITEM_FIELDS, "started_at")


def item_rows(project_id: int, manifests: list[Manifest], call_pks: list[int]) -> list[tuple[Any, ...]]:
    return list(iter_item_rows(project_id, manifests, call_pks))


def iter_item_rows(project_id: int, manifests: list[Manifest], call_pks: list[int]) -> Iterator[tuple[Any, ...]]:
    # No ``clean_text`` here (it would be a large share of this loop's time, one call per field):
    # every manifest stored came through ``decode``, whose NUL rule already turned each
    # "\u0000" into U+FFFD, and a raw NUL byte is malformed JSON, so no string here holds one.
    return (
        (
            call_pk,
            project_id,
            ordinal,
            i.id,
            i.kind,
            i.action,
            i.trust,
            i.priority,
            i.pinned,
            i.zone,
            i.position,
            i.requested_tokens,
            i.granted_tokens,
            i.used_tokens,
            i.reason,
            i.source_ref,
            i.source_version,
            i.content_hash,
            i.group,
            i.text,
            i.label,
            m.started_at,  # the call's time: the partition key
        )
        for m, call_pk in zip(manifests, call_pks)
        for ordinal, i in enumerate(m.items)
    )


def insert_rows(
    model: type[Any],
    rows: list[dict[str, Any]],
    *,
    pks: list[int] | None = None,
    meanwhile: Callable[[], Any] | None = None,
) -> list[int]:
    """Insert rows (column values by attribute name; missing ones take the model's default)
    with the primary keys ``pks`` (PostgreSQL; reserved from the sequence as the registry's
    rows were written), or the table's own (``pks`` None); return the keys (SQLite: always).

    On PostgreSQL: COPY plain values (JSON columns as Python objects: psycopg encodes them
    for jsonb). Django's bulk_create binds the raw manifests (kilobytes each) as quoted array
    literals, which cost several times the COPY itself, and building model instances and
    preparing each field through Django cost as much again (docs/performance.md, "Ingest").
    ``meanwhile`` (PostgreSQL) runs once the rows are sent, before waiting for the server.
    """
    if connection.vendor != "postgresql":
        objs = [model(**row) for row in rows]
        model.objects.bulk_create(objs)
        return [obj.pk for obj in objs]
    columns, values = values_statement(model, rows, pks)
    with connection.cursor() as cursor:
        copy_rows(cursor, model._meta.db_table, columns, values, meanwhile=meanwhile)
    return pks or []


def values_statement(
    model: type[Any], rows: list[dict[str, Any]], pks: list[int] | None = None
) -> tuple[list[str], list[list[Any]]]:
    """The columns of ``model`` (its primary key first when ``pks`` are given) and each row's
    values in their order, for ``copy_rows``; a missing value takes the field's default."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    defaults = {f.attname: f.get_default() for f in fields}
    names = [f.attname for f in fields]
    columns = [f.column for f in fields]
    values = [[row[n] if n in row else defaults[n] for n in names] for row in rows]
    if pks:
        columns.insert(0, model._meta.pk.column)
        values = [[pk, *v] for pk, v in zip(pks, values, strict=True)]
    return columns, values


_column_types: dict[tuple[str, str], dict[str, int]] = {}


def copy_rows(
    cursor: Any, table: str, columns: list[str], rows: Any, *, meanwhile: Callable[[], Any] | None = None
) -> None:
    """COPY rows into a table in PostgreSQL's binary format: psycopg writes each value with
    its C dumper (far less client time than the text format, and no text for the
    server to parse). The column types are asked once per process. ``meanwhile`` runs after
    the rows are sent and before the COPY's end waits for the server to have stored them."""
    key = (connection.settings_dict["NAME"], table)
    if key not in _column_types:
        cursor.execute(
            "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0",
            [table],
        )
        _column_types[key] = dict(cursor.fetchall())
    types = _column_types[key]
    quoted = ", ".join(connection.ops.quote_name(c) for c in columns)
    with cursor.cursor.copy(f"COPY {table} ({quoted}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types([types[c] for c in columns])
        for row in rows:
            copy.write_row(row)
        if meanwhile is not None:
            meanwhile()


def evidence_rows(project: Project, manifests: list[Manifest], call_pks: list[int]) -> list[dict[str, Any]]:
    return [
        dict(
            call_id=call_pk,
            project_id=project.pk,
            started_at=m.started_at,
            key=clean_text(e.key),
            label=clean_text(e.label),
            literal=clean_text(e.literal),
            expected_item=clean_text(e.expected_item),
            present=e.present,
            found_in=clean_text(e.found_in),
            used=e.used,
        )
        for m, call_pk in zip(manifests, call_pks)
        for e in m.evidence
    ]


def store_children(
    project: Project,
    manifests: list[Manifest],
    call_pks: list[int],
    evidence: list[dict[str, Any]] | None = None,
) -> None:
    """The calls' children but their items (written first, ``store_rows``, or by ``_store``
    on SQLite): evidence (``evidence_rows``, built here when not given), compactions with
    their invariants, context edits."""
    if evidence is None:
        evidence = evidence_rows(project, manifests, call_pks)
    if evidence:
        insert_rows(Evidence, evidence)

    compactions: list[Compaction] = []
    invariants_of: list[list[Any]] = []
    for m, call_pk in zip(manifests, call_pks):
        for c in m.compactions:
            compactions.append(
                Compaction(
                    call_id=call_pk,
                    project=project,
                    started_at=m.started_at,
                    event_id=clean_text(c.id),
                    strategy=clean_text(c.strategy),
                    trigger=clean_text(c.trigger),
                    tokens_before=c.tokens_before,
                    tokens_after=c.tokens_after,
                    kept_turns=c.kept_turns,
                    summary_item=clean_text(c.summary_item),
                    failed_invariants=sum(1 for inv in c.invariants if not inv.ok),
                )
            )
            invariants_of.append(c.invariants)
    if compactions:
        Compaction.objects.bulk_create(compactions)
        Invariant.objects.bulk_create(
            [
                Invariant(
                    compaction_id=comp.pk,
                    started_at=comp.started_at,
                    name=inv.name,
                    ok=inv.ok,
                    detail=clean_text(inv.detail),
                    lost=[clean_text(x) for x in inv.lost],
                )
                for comp, invs in zip(compactions, invariants_of)
                for inv in invs
            ],
        )

    edits = [
        ContextEdit(
            call_id=call_pk,
            project=project,
            started_at=m.started_at,
            type=clean_text(e.type),
            cleared_count=e.cleared_count,
            cleared_tokens=e.cleared_tokens,
            kept=e.kept,
            item_ids=[clean_text(x) for x in e.item_ids],
        )
        for m, call_pk in zip(manifests, call_pks)
        for e in m.context_edits
    ]
    if edits:
        ContextEdit.objects.bulk_create(edits)


def register_keys(project: Project, calls: list[dict[str, Any]], call_pks: list[int]) -> None:
    """The idempotency registry's rows of the stored calls, on SQLite (a unique-key race raises
    here). PostgreSQL writes them with the runs (``_upsert_runs_and_register``)."""
    CallKey.objects.bulk_create(
        [
            CallKey(
                project_id=project.pk,
                call_key=c["call_id"],
                content_hash=c["content_hash"],
                call_id=pk,
                started_at=c["started_at"],
            )
            for c, pk in zip(calls, call_pks, strict=True)
        ]
    )
