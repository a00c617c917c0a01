"""The context manifest, schema ``ctxview.manifest/v1``: defined once, here.

Agents build it with ctxkit, the server validates incoming bodies with the same
types, and the JSON Schema published at ``/api/v1/schema/manifest.json`` (and in
``docs/manifest.schema.json``) is generated from them. msgspec does the structural
checks (types, ranges, lengths, enums) at C speed; :func:`semantic_errors` adds the
few rules that span fields (used <= granted, unique item ids, ...).

Unknown fields are rejected rather than ignored: a typo such as ``input_token``
would otherwise silently lose data. Optional fields may be added to v1 (old
manifests stay valid; ``prefix.segments[].lines`` / ``.text`` came that way); a
changed meaning or a new required field comes with a new schema version.
"""

from __future__ import annotations

import re
import typing
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, TypeGuard, get_args

import msgspec

SCHEMA_V1: Final = "ctxview.manifest/v1"

# Limits, shared by the SDK (which never builds a manifest the server refuses) and
# the server (which answers a breach with the JSON path of the field).
MAX_ITEMS = 2000
MAX_EVIDENCE = 500
MAX_COMPACTIONS = 50
MAX_EDITS = 100
MAX_SEGMENTS = 64
MAX_LINES = 2000  # line hashes per prefix segment; the last one covers any lines beyond
MAX_ID = 200
MAX_NAME = 200
MAX_REASON = 2000
MAX_TEXT = 200_000
# A working directory's path: long enough for any real one, short enough for a database index
# entry (PostgreSQL's B-tree refuses one above ~2,700 bytes: 500 characters of 4-byte UTF-8 fit).
MAX_PATH = 500
MAX_TOKENS = 100_000_000
# Counts and positions (steps, turns, cleared tool results, item positions): far above any
# real agent, far below the 32-bit columns that store them.
MAX_COUNT = 10_000_000
# Timestamps must fall in [EARLIEST, LATEST) UTC once their offset is applied: PostgreSQL
# and Python disagree outside years 1..9999, and hourly rollups need room on both sides.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)
# Call and run ids (the idempotency key, and parts of page URLs) hold no control character
# (U+0001-U+001F, U+007F; NUL is replaced by the server before this check, see docs/api.md).
# The workspace's cwd and branch (run metadata, in filter URLs) follow the same rule. Every
# other string keeps control characters as data, escaped when shown: a pattern on the hundreds
# of item ids of a manifest would triple the cost of validation.
NO_CONTROL = "^[^\x00-\x1f\x7f]*$"

Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID)]
CallId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID, pattern=NO_CONTROL)]
Name = Annotated[str, msgspec.Meta(max_length=MAX_NAME)]
Reason = Annotated[str, msgspec.Meta(max_length=MAX_REASON)]
Hash = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Tokens = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
Timestamp = Annotated[
    datetime,
    msgspec.Meta(tz=True, description="RFC 3339 with an offset; 2000-01-01T00:00:00Z <= value < 2100-01-01T00:00:00Z"),
]

ItemKind = Literal[
    "system",
    "tools",
    "task",
    "constraint",
    "memory",
    "history",
    "tool_result",
    "retrieval",
    "summary",
    "example",
    "state",
    "user",
    "other",
]
ITEM_KINDS: tuple[str, ...] = get_args(ItemKind)


def is_item_kind(kind: str) -> TypeGuard[ItemKind]:
    """Whether ``kind`` is one of the manifest's item kinds (a block or a record may hold others)."""
    return kind in ITEM_KINDS

Action = Literal[
    "keep",
    "compress",
    "extract",
    "summarize",
    "truncate",
    "ref",
    "dedupe",
    "drop",
    "hard_cut",
    "clear",
]
ACTIONS: tuple[str, ...] = get_args(Action)
# Actions after which nothing of the item reaches the model.
ABSENT_ACTIONS = frozenset({"drop", "dedupe", "clear"})


def is_action(action: str) -> TypeGuard[Action]:
    """Whether ``action`` is one of the manifest's actions (a stored row holds it as a string)."""
    return action in ACTIONS

Zone = Literal["head", "middle", "tail"]
Trust = Literal["trusted", "untrusted"]
Verified = Literal["yes", "no", "unknown"]
InvariantName = Literal["pending_obligations", "active_operations", "user_constraints", "required_evidence"]
INVARIANT_NAMES: tuple[str, ...] = get_args(InvariantName)


class _Struct(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """A manifest part. Not tracked by the cyclic collector (``gc=False``): a manifest is a tree of
    values that never refers back to itself, and a call's hundreds of items then set off no
    collection, in the agent building them or in the server decoding them."""


class Builder(_Struct, kw_only=True):
    """What built the context: a framework or ctxkit, and its version."""

    name: Name
    version: Name = ""


class Workspace(_Struct, kw_only=True):
    """Where the agent worked (optional, additive to v1): its working directory and the git branch
    checked out there. The server keeps them on the run (docs/manifest.md, "Workspace")."""

    cwd: Annotated[str, msgspec.Meta(max_length=MAX_PATH, pattern=NO_CONTROL)] = ""
    git_branch: Annotated[str, msgspec.Meta(max_length=MAX_NAME, pattern=NO_CONTROL)] = ""


# What git answers for a branch when there is none (a detached HEAD, or no repository at all):
# git refuses it as a branch name, so it never names one.
_NO_BRANCH = "HEAD"
_CONTROL = re.compile("[\x00-\x1f\x7f]")


def workspace_of(cwd: str | None, git_branch: str | None) -> Workspace | None:
    """The workspace an agent reported, as the schema takes it: a value the schema would refuse
    (too long, a control character) is left out rather than failing the manifest, a branch of
    ``HEAD`` names none; None when nothing is left."""
    cwd = (cwd or "").strip()
    branch = (git_branch or "").strip()
    if len(cwd) > MAX_PATH or _CONTROL.search(cwd):
        cwd = ""
    if len(branch) > MAX_NAME or _CONTROL.search(branch) or branch == _NO_BRANCH:
        branch = ""
    return Workspace(cwd=cwd, git_branch=branch) if cwd or branch else None


class Budget(_Struct, kw_only=True):
    """The token budget of the call. Without ``input_cap`` the cap is
    ctxkit.figures.budget_input_cap's: window - reserve - margin."""

    window: Annotated[int, msgspec.Meta(gt=0, le=MAX_TOKENS)]
    output_reserve: Tokens = 0
    safety_margin: Tokens = 0
    input_cap: Tokens | None = None
    # The builder's own check of |x| + R <= W (the budget guarantee, docs/sdk.md): what it measured of the final text
    # (everything included: restated constraints, the caller's blocks, separators), and, when
    # even the pinned items do not fit, an explicit over-budget flag with the reason.
    measured_tokens: Tokens | None = None
    over_budget: bool = False
    over_budget_reason: Reason | None = None


class PrefixSegment(_Struct, kw_only=True):
    """One segment of the stable prefix (system, tools, ...) with its own hash,
    so a cache miss can be pinned to the segment that changed."""

    name: Name
    hash: Hash
    tokens: Tokens = 0
    # Optional (additive to v1): one short hash per line of the segment's text, so a cache
    # miss can be pinned to the line that changed; ``text`` only when the agent allows text.
    lines: Annotated[list[Hash], msgspec.Meta(max_length=MAX_LINES)] | None = None
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT)] | None = None


class Prefix(_Struct, kw_only=True):
    hash: Hash
    tokens: Tokens = 0
    segments: Annotated[list[PrefixSegment], msgspec.Meta(max_length=MAX_SEGMENTS)] = []


class Usage(_Struct, kw_only=True):
    """Usage in one normal form (OpenTelemetry's meaning): input_tokens includes
    the cached reads and writes; uncached = input - cache_read - cache_write."""

    input_tokens: Tokens = 0
    cache_read_tokens: Tokens = 0
    cache_write_tokens: Tokens = 0
    output_tokens: Tokens = 0
    reasoning_tokens: Tokens | None = None
    # Optional (additive to v1): the part of cache_write_tokens written with a 1-hour TTL, which
    # providers price above a 5-minute write (Anthropic's cache_creation.ephemeral_1h_input_tokens).
    cache_write_1h_tokens: Tokens = 0


# --- Replay settings (optional, additive to v1): how ctxkit's allocator treated the call, so the
# what-if replay can run it again and reproduce it exactly (docs/manifest.md, "Replay settings").

Policy = Literal["pin", "extract", "summarize", "truncate", "ref", "window", "schema", "drop"]
POLICIES: tuple[str, ...] = get_args(Policy)


class ItemAllocation(_Struct, kw_only=True):
    """How the allocator treated one candidate: its policy, the floor it applied, its priority
    after aging, and whether lossless steps (repeated lines removed) ran before it was counted."""

    policy: Policy
    min_tokens: Tokens = 0
    effective_priority: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)] | None = None
    lossless: bool = False


class AllocatorSettings(_Struct, kw_only=True):
    """The allocator's mode, the token estimator it counted with (``ctxkit`` = ctxkit's default
    estimator; ``tiktoken:<encoding>``; ``custom:<name>`` cannot be re-run elsewhere) and the tokens
    held back from its input cap (ContextBuilder's check of the final text)."""

    mode: Literal["priority", "naive"] = "priority"
    estimator: Name = "ctxkit"
    held_back: Tokens = 0  # kept out of the allocation for the caller's blocks, restated constraints, separators


class Item(_Struct, kw_only=True):
    """One candidate for the context and what was done with it."""

    id: Id
    kind: ItemKind
    action: Action
    requested_tokens: Tokens
    granted_tokens: Tokens | None = None
    used_tokens: Tokens | None = None
    priority: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 0
    pinned: bool = False
    trust: Trust = "trusted"
    zone: Zone | None = None
    position: Count | None = None
    reason: Reason = ""
    source_ref: Annotated[str, msgspec.Meta(max_length=1000)] | None = None
    source_version: Name | None = None
    content_hash: Hash | None = None
    group: Id | None = None
    text: Annotated[str, msgspec.Meta(max_length=MAX_TEXT)] | None = None
    # What the agent calls it: a tool by its name, a message by role and turn (ctxkit.record.labels).
    label: Name | None = None
    # Memory write-back: the id of the older fact this one replaces.
    supersedes: Id | None = None
    allocation: ItemAllocation | None = None  # replay settings (above)


class Evidence(_Struct, kw_only=True):
    """A required piece of evidence (a key field) and whether it reached the model."""

    key: Id
    label: Name = ""
    literal: Annotated[str, msgspec.Meta(max_length=MAX_REASON)] | None = None
    expected_item: Id | None = None
    present: bool
    found_in: Id | None = None
    used: bool | None = None


class Invariant(_Struct, kw_only=True):
    name: InvariantName
    ok: bool
    detail: Reason = ""
    lost: Annotated[list[Name], msgspec.Meta(max_length=MAX_EVIDENCE)] = []


class Compaction(_Struct, kw_only=True):
    """A compaction event and the invariants checked after it."""

    id: Id
    strategy: Name
    tokens_before: Tokens
    tokens_after: Tokens
    trigger: Name = ""
    kept_turns: Count | None = None
    summary_item: Id | None = None
    invariants: Annotated[list[Invariant], msgspec.Meta(max_length=16)] = []


class ContextEdit(_Struct, kw_only=True):
    """A context edit such as clearing old tool results (Anthropic's
    clear_tool_uses): how many were cleared and how many tokens that freed."""

    type: Name
    cleared_count: Count = 0
    cleared_tokens: Tokens = 0
    kept: Count | None = None
    item_ids: Annotated[list[Id], msgspec.Meta(max_length=MAX_ITEMS)] = []


class Claim(_Struct, kw_only=True):
    """A claim of the answer and the evidence keys it rests on."""

    text: Reason
    evidence_keys: Annotated[list[Id], msgspec.Meta(max_length=MAX_EVIDENCE)] = []


class Outcome(_Struct, kw_only=True):
    status: Name = "ok"
    finish_reason: Name | None = None
    verified: Verified = "unknown"
    claims: Annotated[list[Claim], msgspec.Meta(max_length=MAX_EVIDENCE)] | None = None


class Manifest(_Struct, kw_only=True):
    """One model call's context manifest."""

    schema: Literal["ctxview.manifest/v1"]
    call_id: CallId
    run_id: CallId
    step: Count
    model: Name
    started_at: Timestamp
    budget: Budget
    provider: Name = ""
    agent: Name = "default"
    parent_call_id: CallId | None = None
    parent_run_id: CallId | None = None
    ended_at: Timestamp | None = None
    builder: Builder | None = None
    prefix: Prefix | None = None
    usage: Usage = msgspec.field(default_factory=Usage)
    items: Annotated[list[Item], msgspec.Meta(max_length=MAX_ITEMS)] = []
    evidence: Annotated[list[Evidence], msgspec.Meta(max_length=MAX_EVIDENCE)] = []
    compactions: Annotated[list[Compaction], msgspec.Meta(max_length=MAX_COMPACTIONS)] = []
    context_edits: Annotated[list[ContextEdit], msgspec.Meta(max_length=MAX_EDITS)] = []
    outcome: Outcome | None = None
    warnings: Annotated[list[Reason], msgspec.Meta(max_length=100)] = []
    # The prompt-cache TTL in force for this call: after a longer pause the
    # next call's miss is expected (the server's "ttl" cause), not a regression.
    cache_ttl_seconds: Annotated[int, msgspec.Meta(gt=0, le=30 * 86400)] | None = None
    allocator: AllocatorSettings | None = None  # replay settings (above)
    workspace: Workspace | None = None


# --------------------------------------------------------------------------- #
# Validation


class FieldError(msgspec.Struct, frozen=True):
    """One bad field: its JSON path (``$.items[3].used_tokens``) and what is wrong."""

    path: str
    message: str


_decoder = msgspec.json.Decoder(Manifest)


def decode_manifest(data: bytes) -> Manifest:
    """Decode and validate one manifest from JSON bytes (raises msgspec errors)."""
    return _decoder.decode(data)


def convert_manifest(obj: Any) -> tuple[Manifest | None, list[FieldError]]:
    """Validate an already parsed object; return the manifest or every error found."""
    try:
        manifest = msgspec.convert(obj, Manifest)
    except msgspec.ValidationError:
        return None, structural_errors(obj)
    errors = semantic_errors(manifest)
    return (None, errors) if errors else (manifest, [])


def structural_errors(obj: Any) -> list[FieldError]:
    """Every structural error of ``obj`` against Manifest, not just the first.

    msgspec stops at the first error, so after a failure we walk the object and
    convert each field on its own. This is the slow path, taken only for bad input.
    """
    errors: list[FieldError] = []
    _walk(obj, Manifest, "$", errors)
    return errors or [FieldError(path="$", message="invalid manifest")]


def _walk(obj: Any, struct_type: type[msgspec.Struct], path: str, errors: list[FieldError]) -> None:
    if not isinstance(obj, dict):
        _convert_one(obj, struct_type, path, errors)
        return
    hints = _hints(struct_type)
    for key in obj:
        if key not in hints:
            errors.append(FieldError(path=f"{path}.{key}", message="unknown field"))
    for name, (hint, required) in hints.items():
        sub = f"{path}.{name}"
        if name not in obj:
            if required:
                errors.append(FieldError(path=sub, message="required field is missing"))
            continue
        value = obj[name]
        nested, element, max_length = _shape(hint)
        if nested is not None and isinstance(value, dict):
            _walk(value, nested, sub, errors)
        elif element is not None and isinstance(value, list):
            if max_length is not None and len(value) > max_length:
                errors.append(FieldError(path=sub, message=f"has {len(value)} entries; at most {max_length} allowed"))
            for index, entry in enumerate(value[: (max_length or len(value))]):
                _walk(entry, element, f"{sub}[{index}]", errors)
        else:
            _convert_one(value, hint, sub, errors)


def _convert_one(value: Any, hint: Any, path: str, errors: list[FieldError]) -> None:
    try:
        msgspec.convert(value, hint)
    except msgspec.ValidationError as exc:
        message, _, rest = str(exc).partition(" - at `$")
        if "matching regex" in message:
            message = "must not contain control characters (U+0000-U+001F, U+007F)"
        errors.append(FieldError(path=path + rest.rstrip("`"), message=message))


_HINTS: dict[type, dict[str, tuple[Any, bool]]] = {}


def _hints(struct_type: type[msgspec.Struct]) -> dict[str, tuple[Any, bool]]:
    """Field name -> (annotated type, required), cached per struct type."""
    if struct_type not in _HINTS:
        annotations = typing.get_type_hints(struct_type, include_extras=True)
        info = msgspec.inspect.type_info(struct_type)
        assert isinstance(info, msgspec.inspect.StructType)  # the type of a Struct class
        _HINTS[struct_type] = {f.encode_name: (annotations[f.name], f.required) for f in info.fields}
    return _HINTS[struct_type]


def _shape(hint: Any) -> tuple[Any, Any, int | None]:
    """(struct type, list element struct type, list max length) of a field's type."""
    t = msgspec.inspect.type_info(hint)
    if isinstance(t, msgspec.inspect.UnionType):
        rest = [x for x in t.types if not isinstance(x, msgspec.inspect.NoneType)]
        t = rest[0] if len(rest) == 1 else t
    if isinstance(t, msgspec.inspect.StructType):
        return t.cls, None, None
    if isinstance(t, msgspec.inspect.ListType) and isinstance(t.item_type, msgspec.inspect.StructType):
        return None, t.item_type.cls, t.max_length
    return None, None, None


def _any_overused(items: list[Item]) -> bool:
    """Whether any item used more tokens than it was granted (a plain loop: on 3.11 it beats
    map/attrgetter over msgspec structs)."""
    for item in items:
        used = item.used_tokens
        if used is not None:
            granted = item.granted_tokens
            if granted is not None and used > granted:
                return True
    return False


def semantic_errors(m: Manifest) -> list[FieldError]:
    """Rules that span fields; msgspec has already checked every field alone."""
    errors: list[FieldError] = []
    for name, when in (("started_at", m.started_at), ("ended_at", m.ended_at)):
        if when is not None and not EARLIEST <= when < LATEST:
            errors.append(
                FieldError(
                    path=f"$.{name}",
                    message=f"{name} {when.isoformat()} is outside 2000-01-01T00:00:00Z..2100-01-01T00:00:00Z",
                )
            )
    if errors:
        return errors
    if m.ended_at is not None and m.ended_at < m.started_at:
        errors.append(FieldError(path="$.ended_at", message="ended_at is before started_at"))
    b = m.budget
    if b.output_reserve + b.safety_margin > b.window:
        errors.append(
            FieldError(path="$.budget.output_reserve", message="output_reserve + safety_margin exceed the window")
        )
    if b.over_budget and not b.over_budget_reason:
        errors.append(FieldError(path="$.budget.over_budget_reason",
                                 message="over_budget is set: say why (over_budget_reason)"))
    u = m.usage
    if u.cache_read_tokens + u.cache_write_tokens > u.input_tokens:
        errors.append(
            FieldError(
                path="$.usage.cache_read_tokens",
                message="cache_read_tokens + cache_write_tokens exceed input_tokens; input_tokens must include "
                "cached tokens (for Anthropic add cache_read_input_tokens and cache_creation_input_tokens)",
            )
        )
    if u.reasoning_tokens is not None and u.reasoning_tokens > u.output_tokens:
        errors.append(FieldError(path="$.usage.reasoning_tokens", message="reasoning_tokens exceed output_tokens"))
    if u.cache_write_1h_tokens > u.cache_write_tokens:
        errors.append(FieldError(path="$.usage.cache_write_1h_tokens",
                                 message="cache_write_1h_tokens exceed cache_write_tokens (they are part of them)"))
    items = m.items
    seen = {item.id for item in items}
    if len(seen) == len(items) and not _any_overused(items):
        # The common case, checked cheaply; the per-item loop below only runs to name what is wrong.
        items = []
    else:
        seen = set()
    for index, item in enumerate(items):  # the path is spelled only for an error
        if item.id in seen:
            errors.append(FieldError(path=f"$.items[{index}].id", message=f"duplicate item id {item.id!r}"))
        seen.add(item.id)
        if item.used_tokens is not None and item.granted_tokens is not None and item.used_tokens > item.granted_tokens:
            errors.append(
                FieldError(
                    path=f"$.items[{index}].used_tokens",
                    message=f"used_tokens ({item.used_tokens}) exceed granted_tokens ({item.granted_tokens})",
                )
            )
    for index, ev in enumerate(m.evidence):
        for field in ("expected_item", "found_in"):
            ref = getattr(ev, field)
            if ref is not None and ref not in seen:
                errors.append(
                    FieldError(path=f"$.evidence[{index}].{field}", message=f"no item with id {ref!r} in $.items")
                )
    return errors


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a v1 manifest, generated from the types above."""
    schema = msgspec.json.schema(Manifest)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "/api/v1/schema/manifest.json"
    schema["title"] = "ctxview context manifest v1"
    return schema


def encode(manifest: Manifest) -> bytes:
    return msgspec.json.encode(manifest)
