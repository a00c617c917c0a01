"""A fast, exact proof that a manifest's JSON holds no duplicate key.

msgspec (like orjson) keeps the last value of a repeated key silently, so ingest must look
for duplicates itself (docs/api.md). Parsing every body once more with Python's ``json`` and
a pairs hook costs several times ``orjson.loads`` per manifest; this check runs in C and costs a
fraction of that (docs/performance.md, "Ingest").

How: the body is decoded a second time with msgspec into *key-mirror* types, generated below
from ``ctxkit.manifest.Manifest``: the same fields, every one defaulting to UNSET
(so only the keys the body holds are encoded again), dates kept as the text sent. Encoding
the mirror gives back the body's distinct keys with their last values. In JSON every key is
followed by exactly one colon outside strings, and the mirror writes every string's colons
as they were sent (raw ``:``; a ``\\u003a`` escape is the one way to send a colon otherwise,
and a body holding one is not judged here). So, for a body that validated as a manifest:

    colons(body) - colons(mirror) = the repeated keys + the colons inside their dropped values

which is zero exactly when no object of the body repeats a key. ``True`` is a proof; on
``False`` (a duplicate, or a body this check does not judge) the caller parses the body the
slow way, which finds every duplicate with its JSON path.
"""

from __future__ import annotations

import types
import typing
from typing import Any, cast

import msgspec

from ctxkit.manifest import Manifest

_mirrors: dict[type, type] = {}


def _mirror(cls: type) -> type:
    if cls not in _mirrors:
        fields = [
            (f.encode_name, _mirror_type(f.type) | msgspec.UnsetType, msgspec.UNSET)
            for f in cast(msgspec.inspect.StructType, msgspec.inspect.type_info(cls)).fields
        ]
        # gc=False: plain data, never in a cycle; the collector need not track them.
        _mirrors[cls] = msgspec.defstruct(
            f"Keys{cls.__name__}", fields, omit_defaults=True, forbid_unknown_fields=True, gc=False
        )
    return _mirrors[cls]


def _mirror_type(t: msgspec.inspect.Type) -> Any:
    """The mirror of one field type: structs mirrored, constraints dropped (the real decode
    checked them), dates and literals as plain text (written back as sent)."""
    inspect = msgspec.inspect
    if isinstance(t, inspect.Metadata):
        return _mirror_type(t.type)
    if isinstance(t, inspect.StructType):
        return _mirror(t.cls)
    if isinstance(t, inspect.UnionType):
        return typing.Union[tuple(_mirror_type(x) for x in t.types)]  # noqa: UP007 - built at run time
    if isinstance(t, inspect.ListType):
        return types.GenericAlias(list, (_mirror_type(t.item_type),))
    if isinstance(t, inspect.NoneType):
        return None
    if isinstance(t, (inspect.StrType, inspect.DateTimeType, inspect.LiteralType)):
        return str
    if isinstance(t, inspect.BoolType):
        return bool
    if isinstance(t, inspect.IntType):
        return int
    # A new kind of field in the manifest needs its mirror here: fail at import, not silently.
    raise TypeError(f"no key mirror for {t!r}")


_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_mirror(Manifest))
_encoder = msgspec.json.Encoder()


def no_duplicate_keys(raw: bytes) -> bool:
    """True only if no JSON object in ``raw`` (a manifest that decoded and validated as
    ``Manifest``) holds the same key twice. False means: look the slow way."""
    # Every escape starts with a backslash: one memchr settles most bodies (a search for the
    # five-byte escape itself is a noticeable share of this check).
    if b"\\" in raw and b"\\u003" in raw:  # maybe an escaped colon (\\u003a): not judged here
        return False
    try:
        keys = _decoder.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return False  # e.g. a dropped duplicate's value of another type
    return _colons(raw) == _colons(_encoder.encode(keys))


def _colons(data: bytes) -> int:
    # The same count as ``data.count(b":")``; in CPython 3.11 ``count`` walks a single byte
    # in a plain loop, while ``replace`` finds it with memchr, which is faster.
    return len(data) - len(data.replace(b":", b""))
