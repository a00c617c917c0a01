"""Where in a JSON body a byte-level error lies: the JSON path of the string or value that holds a
byte offset (invalid UTF-8, a broken escape), or of the value that nests too deeply.

The decoders report such errors without a field (msgspec's ``UnicodeDecodeError`` counts from the
start of the string it was decoding; a ``RecursionError`` has no position at all), so the door
calls this on its error path only: one scan of the bytes that reads the JSON structure token by
token, without recursion and without decoding any string but keys, and stops at the offset.
Nothing here runs for a body that decodes.
"""

from __future__ import annotations

import json
import re

__all__ = ["path_at", "deep_path", "first_invalid_utf8", "error_offset"]

_SPACE = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"?', re.DOTALL)  # an unterminated string runs to the end
_SCALAR = re.compile(rb"[^,\]}:\s\"\[{]*")
_BYTE = re.compile(r"\(byte (\d+)\)")
DEEP = 256  # deeper than any manifest can be, shallower than where the decoders give up


def first_invalid_utf8(raw: bytes) -> int | None:
    """The offset of the first byte that is not UTF-8 (CESU-8 surrogates and overlong forms
    included), or None."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def error_offset(message: str) -> int | None:
    """The byte offset in a msgspec ``DecodeError`` message ("... (byte 140)"), or None."""
    match = _BYTE.search(message)
    return int(match.group(1)) if match else None


def _key(token: bytes) -> str:
    try:
        key = json.loads(token)
    except ValueError:
        key = token[1:-1].decode("utf-8", "replace")
    return key if isinstance(key, str) else str(key)


def _render(parts: list[str | int]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def _scan(raw: bytes, offset: int | None, depth: int | None) -> list[str | int] | None:
    """The path parts at ``offset`` (the innermost value holding it), or where the nesting first
    passes ``depth``; None when the bytes end (or stop being JSON) before either."""
    parts: list[str | int] = []  # one per open container: its current key or index
    kinds: list[bool] = []  # True: object, False: array
    expect_key = False
    pos, end = 0, len(raw)
    while True:
        space = _SPACE.match(raw, pos)
        pos = space.end() if space is not None else pos
        if pos >= end:
            return None
        if offset is not None and pos > offset:  # the offset was whitespace or punctuation
            return parts[:-1] if kinds else []
        char = raw[pos]
        if char in b"{[":
            if offset is not None and pos == offset:
                return list(parts)
            kinds.append(char == ord("{"))
            parts.append("" if kinds[-1] else 0)
            expect_key = kinds[-1]
            pos += 1
            if depth is not None and len(kinds) > depth:
                return parts[:-1]  # the container that passed the depth
            continue
        if char in b"}]":
            if offset is not None and pos == offset or not kinds:
                return parts[:-1] if kinds else []
            kinds.pop()
            parts.pop()
            expect_key = False
            pos += 1
            continue
        if char == ord(","):
            if not kinds:
                return None
            if kinds[-1]:
                expect_key = True
            else:
                parts[-1] = int(parts[-1]) + 1
            pos += 1
            continue
        if char == ord(":"):
            expect_key = False
            pos += 1
            continue
        token = (_STRING if char == ord('"') else _SCALAR).match(raw, pos)
        stop = token.end() if token is not None and token.end() > pos else pos + 1
        if expect_key and kinds:
            if char != ord('"'):  # not a key where one belongs: the object is what is wrong
                return parts[:-1] if offset is not None and pos <= offset < stop else None
            parts[-1] = _key(raw[pos:stop])
            if offset is not None and pos <= offset < stop:
                return list(parts)  # a byte of the key: the key names the field
        elif offset is not None and pos <= offset < stop:
            return list(parts)
        pos = stop


def path_at(raw: bytes, offset: int) -> str | None:
    """The JSON path of the string or value holding byte ``offset`` of ``raw``, or None."""
    parts = _scan(raw, offset, None)
    return None if parts is None else _render(parts)


def deep_path(raw: bytes) -> str | None:
    """The JSON path of the value whose nesting passes what any manifest holds (the repeated
    tail of brackets or keys inside it left out: ``$.step``, not ``$.step[0][0]...``), or None."""
    parts = _scan(raw, None, DEEP)
    if parts is None:
        return None
    for period in (1, 2):
        block = parts[-period:]
        if len(parts) >= 2 * period and parts[-2 * period : -period] == block:
            while len(parts) >= period and parts[-period:] == block:
                del parts[-period:]
            break
    return _render(parts[:8])
