"""The ingest door: a request body split into raw manifests, each decoded, validated and
proven free of duplicate keys, or turned into 4xx errors with a JSON path, whatever the bytes
hold (docs/api.md, "What the door accepts"). ``manifests/ingest/store.py`` stores what passes.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import msgspec
from django.conf import settings

from ctxkit.manifest import FieldError, Manifest, decode_manifest, semantic_errors, structural_errors
from manifests.ingest.dupkeys import no_duplicate_keys
from manifests.ingest.locate import deep_path, error_offset, first_invalid_utf8, path_at


class BadRequest(Exception):
    """The request as a whole is unusable (not one manifest among others)."""

    def __init__(self, message: str, path: str = "$", status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.status = status


_top_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])
_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])


class _Batch(msgspec.Struct, forbid_unknown_fields=True):
    manifests: list[msgspec.Raw]


# A well-formed batch split in one pass (the general path scans the body twice).
_batch_decoder = msgspec.json.Decoder(_Batch)

# --------------------------------------------------------------------------- #
# Decoding: every body is turned into manifests or into 4xx errors with a path,
# whatever the bytes hold (docs/api.md, "What the door accepts").

# The NUL rule: PostgreSQL text cannot hold U+0000, so every NUL in any string becomes
# U+FFFD before validation, hashing and the idempotency lookup, on both databases: the
# id that is looked up is the id that is stored. In JSON a NUL can only be written
# "\u0000" (a raw NUL byte is malformed JSON), so this is one scan of the bytes; the
# look-behind skips an escaped backslash followed by the text "u0000".
_NUL_ESCAPE = re.compile(rb"(?<!\\)((?:\\\\)*)\\u0000")


def normalise_nul(raw: bytes) -> bytes:
    # Every JSON escape starts with a backslash: one memchr rules most bodies out at once.
    if b"\\" not in raw or not _NUL_ESCAPE.search(raw):
        return raw
    return _NUL_ESCAPE.sub(rb"\1\\ufffd", raw)


_DECODE_ERRORS = (msgspec.DecodeError, ValueError, RecursionError)  # ValueError covers UnicodeDecodeError


def _decode_message(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 ({exc.reason}): strings must be UTF-8; CESU-8 surrogates and overlong forms are not"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply: a manifest is at most 6 levels deep"
    if isinstance(exc, msgspec.ValidationError):
        return f"number out of range: {exc}"
    return f"malformed JSON: {exc}"


def located(raw: bytes, exc: BaseException) -> FieldError:
    """A decoder's error as a field error: at the JSON path of the string or value holding the
    bad byte (or nesting too deeply) when the bytes show it, else at ``$`` with the byte offset.
    Runs only once decoding failed: the scan costs a pass over the bytes."""
    message = _decode_message(exc)
    if isinstance(exc, RecursionError):
        path = deep_path(raw)
        return FieldError(path=path or "$", message=message)
    offset = first_invalid_utf8(raw) if isinstance(exc, UnicodeDecodeError) else error_offset(str(exc))
    if offset is None:
        return FieldError(path="$", message=message)
    path = path_at(raw, offset)
    if path is None or path == "$":
        return FieldError(path="$", message=message if f"byte {offset}" in message else f"{message} (at byte {offset})")
    return FieldError(path=path, message=message)


def printable(text: str | None) -> str | None:
    if text is None:
        return None
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class _DuplicateKeys(dict[str, Any]):
    """A JSON object that held the same key more than once (``duplicates`` names them)."""

    duplicates: list[str]


def _strict_loads(raw: bytes) -> tuple[Any, bool]:
    """Parse with Python's json, marking objects with duplicate keys. Several times slower than
    msgspec, so used only when the fast checks cannot rule duplicates out."""
    found = False

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal found
        obj = dict(pairs)
        if len(obj) == len(pairs):
            return obj
        found = True
        marked = _DuplicateKeys(obj)
        marked.duplicates = sorted(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        return marked

    return json.loads(raw, object_pairs_hook=pairs_hook), found


def _duplicate_key_errors(obj: Any, path: str, errors: list[FieldError]) -> list[FieldError]:
    if isinstance(obj, dict):
        for key in getattr(obj, "duplicates", ()):
            errors.append(FieldError(path=f"{path}.{key}", message="duplicate key: each key may appear once"))
        for key, value in obj.items():
            if isinstance(value, (dict, list)):
                _duplicate_key_errors(value, f"{path}.{key}", errors)
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            if isinstance(value, (dict, list)):
                _duplicate_key_errors(value, f"{path}[{index}]", errors)
    return errors


def split_body(body: bytes) -> tuple[list[msgspec.Raw] | list[bytes], str]:
    """Split a body into raw manifests and the JSON path prefix of each.

    The body is one manifest object, or ``{"manifests": [ ... ]}``.
    """
    try:
        raws = _batch_decoder.decode(body).manifests
    except _DECODE_ERRORS:
        pass  # not a plain batch: the general path below tells which error it is
    else:
        if body.count(b'"manifests"') == 1:
            return _bounded(raws), "$.manifests[{}]"
    try:
        top = _top_decoder.decode(body)
    except msgspec.ValidationError:
        raise BadRequest('the body must be a JSON object: one manifest, or {"manifests": [...]}') from None
    except _DECODE_ERRORS as exc:
        error = located(body, exc)
        raise BadRequest(error.message, path=error.path) from None
    if "manifests" not in top:
        return [body], "$"
    if body.count(b'"manifests"') > 1:
        try:
            obj, duplicated = _strict_loads(body)
        except _DECODE_ERRORS as exc:
            error = located(body, exc)
            raise BadRequest(error.message, path=error.path) from None
        if duplicated and isinstance(obj, _DuplicateKeys):  # other top-level keys are refused below
            raise BadRequest("duplicate key: each key may appear once", path="$.manifests")
    extra = sorted(set(top) - {"manifests"})
    if extra:
        raise BadRequest(f"unknown field {extra[0]!r} beside 'manifests' in a batch", path=f"$.{extra[0]}")
    try:
        raws = _list_decoder.decode(top["manifests"])
    except msgspec.ValidationError:
        raise BadRequest("'manifests' must be an array of manifests", path="$.manifests") from None
    return _bounded(raws), "$.manifests[{}]"


def _bounded(raws: list[msgspec.Raw]) -> list[msgspec.Raw]:
    """The batch's manifests, refused when empty or over the batch limit."""
    if not raws:
        raise BadRequest("'manifests' is empty: send at least one manifest", path="$.manifests")
    limit = settings.CTXVIEW_MAX_BATCH
    if len(raws) > limit:
        # 413, like an oversized body: ctxkit's client splits the batch and resends.
        raise BadRequest(
            f"a batch holds at most {limit} manifests; this one has {len(raws)}: split it",
            path="$.manifests",
            status=413,
        )
    return raws


def rebase(errors: list[FieldError], prefix: str) -> list[FieldError]:
    if prefix == "$":
        return errors
    return [FieldError(path=prefix + e.path[1:], message=e.message) for e in errors]


def validate(raw: bytes | msgspec.Raw) -> tuple[Manifest | None, list[FieldError], str | None]:
    """Decode one raw manifest. Returns (manifest, errors, call_id if readable)."""
    manifest, errors, call_id, _ = decode(raw)
    return manifest, errors, call_id


def decode(raw: bytes | msgspec.Raw) -> tuple[Manifest | None, list[FieldError], str | None, bytes]:
    """Decode one raw manifest: (manifest or None, errors, call_id if readable, canonical bytes).

    Fast path: one msgspec pass (types, ranges, lengths, UTF-8), the cross-field rules,
    and the canonical re-encoding that ingest hashes anyway. A body equal to its canonical
    form (what ctxkit sends) cannot hold a duplicate key; any other is proven free of them
    by manifests/ingest/dupkeys.py (a second msgspec pass) or, when that cannot prove it, parsed
    by Python's json, which names every duplicate with its path.
    """
    manifest, errors, call_id, canonical, _ = decode_owing_proof(raw, defer_proof=False)
    return manifest, errors, call_id, canonical


def decode_owing_proof(
    raw: bytes | msgspec.Raw, *, defer_proof: bool
) -> tuple[Manifest | None, list[FieldError], str | None, bytes, bytes | None]:
    """``decode``, and the bytes whose duplicate-key proof is still owed (or None).

    With ``defer_proof`` a manifest that is otherwise valid is returned before its proof:
    ingest proves it while PostgreSQL checks the batch's foreign keys, and stores nothing
    it could not prove (``ingest_pg.prove_while_checking``). A manifest with other errors is proven
    here, so its errors are the same either way."""
    raw = normalise_nul(bytes(raw))
    try:
        manifest = decode_manifest(raw)
    except msgspec.ValidationError:
        errors, call_id = _structural(raw)
        return None, errors, call_id, b"", None
    except _DECODE_ERRORS as exc:
        return None, [located(raw, exc)], None, b"", None
    errors = semantic_errors(manifest)
    canonical = msgspec.json.encode(manifest)
    if canonical != raw:
        if defer_proof and not errors:
            return manifest, [], manifest.call_id, canonical, raw
        if not no_duplicate_keys(raw):
            duplicates, unreadable = slow_duplicate_errors(raw)
            errors = duplicates if unreadable else duplicates + errors
    if errors:
        return None, errors, manifest.call_id, b"", None
    return manifest, [], manifest.call_id, canonical, None


def slow_duplicate_errors(raw: bytes) -> tuple[list[FieldError], bool]:
    """Every repeated key of a manifest that msgspec decoded, with its JSON path, by Python's
    json; or (the one error that parser found, True) when it refuses the bytes."""
    try:
        obj, duplicated = _strict_loads(raw)
    except _DECODE_ERRORS as exc:
        return [located(raw, exc)], True
    return (_duplicate_key_errors(obj, "$", []) if duplicated else []), False


def _structural(raw: bytes) -> tuple[list[FieldError], str | None]:
    """The slow path for a manifest msgspec refused: every bad field with its path."""
    try:
        obj, duplicated = _strict_loads(raw)
    except _DECODE_ERRORS as exc:
        return [located(raw, exc)], None
    errors = _duplicate_key_errors(obj, "$", []) if duplicated else []
    call_id = obj.get("call_id") if isinstance(obj, dict) else None
    return errors + structural_errors(obj), call_id if isinstance(call_id, str) else None
