"""Catch prompt-cache breaks in an agent's own tests, before a release (docs/sdk.md,
"Catch cache breaks in CI").

- :func:`assert_prefix_stable` calls the agent's ``build`` again under changed conditions (a
  second call, the clock hours later, other random ids, another user message) and fails with an
  ``AssertionError`` naming the prefix segment and line that changed, with a unified diff.
- :func:`scan_prefix` lists per-call values (ISO dates and times, UUIDs, request ids, epoch
  timestamps) in the cacheable prefix, by segment and line, with the patterns the layout uses
  for its warnings (``ctxkit.context.layout.volatile_matches``).
- :func:`shifted_clock` and :func:`seeded_ids` are the two context managers the helper uses.

Where the clock and the ids are patched: the module attributes (``time.time()``,
``datetime.datetime.now()``, ``datetime.date.today()``, ``uuid.uuid4()``, ``secrets.token_hex()``,
``os.urandom()``, the ``random`` module's shared generator), and the names imported with
``from ... import`` into the modules the build comes from: the module of ``build`` and its
package, and the packages of the modules, functions and classes it references (globals and
closure). Pass ``modules=`` for any other module that reads the clock or makes ids.
"""

from __future__ import annotations

import base64
import datetime as dt
import functools
import inspect
import os
import random
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ctxkit.context.layout import sha256_hex, volatile_matches
from ctxkit.context.prefix_lines import prefix_segment
from ctxkit.context.tokens import estimate_tokens
from ctxkit.manifest import PrefixSegment
from ctxkit.prefixcheck import PrefixChange, compare_prefixes, prefix_segments

__all__ = ["DEFAULT_CLOCK_SHIFT", "DEFAULT_MESSAGES", "Finding", "assert_prefix_stable", "scan_prefix",
           "seeded_ids", "shifted_clock"]

DEFAULT_CLOCK_SHIFT = dt.timedelta(hours=25, minutes=7, seconds=13)  # another day, hour, minute and second
DEFAULT_MESSAGES = ("What changed in the refund rate this week?", "Summarise yesterday's failed payouts.")
_SEEDS = (1103, 2207)

_REAL_DATETIME = dt.datetime
_REAL_DATE = dt.date
# Packages whose globals are never rewritten: the standard library, ctxkit and the test runner.
_NEVER_PATCHED = frozenset({"ctxkit", "pytest", "_pytest", "pluggy", "builtins", "__main__"}) | frozenset(
    sys.stdlib_module_names)


# --------------------------------------------------------------------------- #
# Patching the clock and the ids where the build looks them up


class _RealTypeCheck(type):
    """``isinstance(x, datetime)`` stays true for real datetimes while the name is patched."""

    real: type  # the class each patched class stands for

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls.real)

    def __subclasscheck__(cls, sub: type) -> bool:
        return issubclass(sub, cls.real)


def _clock_types(instant: dt.datetime) -> tuple[type, type]:
    """A ``datetime`` and a ``date`` class whose now/utcnow/today return ``instant`` (real instances)."""

    class FrozenDatetime(_REAL_DATETIME, metaclass=_RealTypeCheck):
        real = _REAL_DATETIME

        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
            return instant.astimezone(tz) if tz is not None else instant.astimezone().replace(tzinfo=None)

        @classmethod
        def utcnow(cls) -> dt.datetime:  # type: ignore[override]
            return instant.astimezone(dt.UTC).replace(tzinfo=None)

        @classmethod
        def today(cls) -> dt.datetime:  # type: ignore[override]
            return cls.now()

    class FrozenDate(_REAL_DATE, metaclass=_RealTypeCheck):
        real = _REAL_DATE

        @classmethod
        def today(cls) -> dt.date:  # type: ignore[override]
            return instant.astimezone().date()

    return FrozenDatetime, FrozenDate


def _unwrap(build: Callable[..., Any]) -> Any:
    fn: Any = build
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.ismethod(fn):
        fn = fn.__func__
    if not inspect.isfunction(fn) and not inspect.isbuiltin(fn) and callable(fn):  # an object with __call__
        fn = inspect.getattr_static(type(fn), "__call__", fn)
    return inspect.unwrap(fn) if callable(fn) else fn


def _top(name: str | None) -> str | None:
    return name.split(".")[0] if name else None


def build_namespaces(
    build: Callable[..., Any] | None, modules: Iterable[ModuleType | str] = ()
) -> list[dict[str, Any]]:
    """The module namespaces whose ``from ... import`` names are patched for ``build`` (see the
    module's docstring)."""
    namespaces: list[dict[str, Any]] = []
    packages: set[str] = set()
    fn = _unwrap(build) if build is not None else None
    own = getattr(fn, "__globals__", None)
    if isinstance(own, dict):
        namespaces.append(own)
        packages.add(_top(own.get("__name__")) or "")
        referenced = list(own.values())
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                referenced.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        for value in referenced:
            name = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
            packages.add(_top(name if isinstance(name, str) else None) or "")
    packages -= _NEVER_PATCHED | {""}
    for name, module in list(sys.modules.items()):
        if module is not None and _top(name) in packages:
            namespaces.append(vars(module))
    for extra in modules:
        namespaces.append(vars(sys.modules[extra] if isinstance(extra, str) else extra))
    unique: dict[int, dict[str, Any]] = {id(ns): ns for ns in namespaces}
    return list(unique.values())


@contextmanager
def _patched(replacements: dict[tuple[ModuleType, str], Any], namespaces: Sequence[dict[str, Any]]) -> Iterator[None]:
    """Set each module attribute, and each namespace name bound to the same original object,
    to its replacement; restore everything on exit."""
    originals = {(module, name): getattr(module, name) for module, name in replacements}
    by_identity = {id(originals[key]): new for key, new in replacements.items()}
    undo: list[tuple[dict[str, Any], str, Any]] = []
    try:
        for (module, name), new in replacements.items():
            setattr(module, name, new)
        for ns in namespaces:
            for name, value in list(ns.items()):
                new = by_identity.get(id(value))
                if new is not None and any(value is original for original in originals.values()):
                    undo.append((ns, name, value))
                    ns[name] = new
        yield
    finally:
        for ns, name, value in reversed(undo):
            ns[name] = value
        for (module, name), value in originals.items():
            setattr(module, name, value)


@contextmanager
def shifted_clock(shift: dt.timedelta = dt.timedelta(0), *, start: dt.datetime | None = None,
                  build: Callable[..., Any] | None = None, modules: Iterable[ModuleType | str] = ()) -> Iterator[
                      dt.datetime]:
    """Stop the clock at ``start`` (default: now) plus ``shift`` for the duration of the block, as
    ``time.time``/``time_ns``/``gmtime``/``localtime``/``strftime``/``ctime``/``asctime``,
    ``datetime.now``/``utcnow``/``today`` and ``date.today`` see it; yields that instant.
    ``time.monotonic`` and ``perf_counter`` keep running (timeouts still work)."""
    base = start if start is not None else _REAL_DATETIME.now(dt.UTC)
    if base.tzinfo is None:
        base = base.astimezone()
    instant = base + shift
    seconds = instant.timestamp()
    nanoseconds = int(seconds) * 1_000_000_000 + instant.microsecond * 1000
    real_gmtime, real_localtime = time.gmtime, time.localtime
    real_strftime, real_ctime, real_asctime = time.strftime, time.ctime, time.asctime
    frozen_datetime, frozen_date = _clock_types(instant)

    def gmtime(secs: float | None = None) -> time.struct_time:
        return real_gmtime(seconds if secs is None else secs)

    def localtime(secs: float | None = None) -> time.struct_time:
        return real_localtime(seconds if secs is None else secs)

    def strftime(format: str, t: Any = None) -> str:
        return real_strftime(format, real_localtime(seconds) if t is None else t)

    def ctime(secs: float | None = None) -> str:
        return real_ctime(seconds if secs is None else secs)

    def asctime(t: Any = None) -> str:
        return real_asctime(real_localtime(seconds) if t is None else t)

    replacements = {
        (time, "time"): lambda: seconds, (time, "time_ns"): lambda: nanoseconds, (time, "gmtime"): gmtime,
        (time, "localtime"): localtime, (time, "strftime"): strftime, (time, "ctime"): ctime,
        (time, "asctime"): asctime, (dt, "datetime"): frozen_datetime, (dt, "date"): frozen_date,
    }
    with _patched(replacements, build_namespaces(build, modules)):
        yield instant


@contextmanager
def seeded_ids(seed: int, *, build: Callable[..., Any] | None = None,
               modules: Iterable[ModuleType | str] = ()) -> Iterator[None]:
    """Make random ids repeatable for the block: the ``random`` module's shared generator is
    seeded with ``seed`` (its state is restored after), and ``uuid.uuid4``/``uuid1``,
    ``secrets.token_bytes``/``token_hex``/``token_urlsafe``/``randbelow``/``choice``/``randbits``
    and ``os.urandom`` draw from a generator seeded with it. Another seed, other ids."""
    rng = random.Random(seed)

    def token_bytes(nbytes: int | None = None) -> bytes:
        return rng.randbytes(32 if nbytes is None else nbytes)

    replacements = {
        (uuid, "uuid4"): lambda: uuid.UUID(int=rng.getrandbits(128), version=4),
        (uuid, "uuid1"): lambda node=None, clock_seq=None: uuid.UUID(int=rng.getrandbits(128), version=1),
        (os, "urandom"): lambda size: rng.randbytes(size),
        (secrets, "token_bytes"): token_bytes,
        (secrets, "token_hex"): lambda nbytes=None: token_bytes(nbytes).hex(),
        (secrets, "token_urlsafe"): lambda nbytes=None: base64.urlsafe_b64encode(token_bytes(nbytes))
        .rstrip(b"=").decode("ascii"),
        (secrets, "randbelow"): lambda exclusive_upper_bound: rng.randrange(exclusive_upper_bound),
        (secrets, "choice"): lambda seq: rng.choice(seq),
        (secrets, "randbits"): lambda k: rng.getrandbits(k),
    }
    state = random.getstate()
    random.seed(seed)
    try:
        with _patched(replacements, build_namespaces(build, modules)):
            yield
    finally:
        random.setstate(state)


# --------------------------------------------------------------------------- #
# The scan


@dataclass(frozen=True)
class Finding:
    """A per-call value in the cacheable prefix: its segment, line (1-based), what it looks like
    (``a timestamp``, ``a UUID``...), the value and the whole line."""

    segment: str
    line: int
    kind: str
    value: str
    text: str

    def __str__(self) -> str:
        return f"segment {self.segment!r}, line {self.line}: {self.kind} {self.value!r} in {self.text.strip()!r}"


def _takes_message(build: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(build).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                  inspect.Parameter.VAR_POSITIONAL)
    return any(p.kind in positional for p in parameters)


def _result_segments(build_or_result: Any, provider: str | None) -> list[PrefixSegment]:
    if callable(build_or_result) and not isinstance(build_or_result, type):
        build = build_or_result
        result = build(DEFAULT_MESSAGES[0]) if _takes_message(build) else build()
        return prefix_segments(result, provider=provider)
    return prefix_segments(build_or_result, provider=provider)


def scan_segments(segments: Iterable[PrefixSegment]) -> list[Finding]:
    """The per-call values in the recorded text of ``segments`` (segments recorded without their
    text cannot be scanned)."""
    findings = []
    for segment in segments:
        if segment.text is None:
            continue
        for number, line in enumerate(segment.text.split("\n"), 1):
            for kind, value, _ in volatile_matches(line):
                findings.append(Finding(segment=segment.name, line=number, kind=kind, value=value, text=line))
    return findings


def scan_prefix(build_or_result: Any, *, provider: str | None = None) -> list[Finding]:
    """Per-call values (ISO dates and times, times of day, UUIDs, long hex ids, request and
    session ids, epoch seconds or milliseconds, "today is") in the cacheable prefix of
    ``build_or_result``: a build callable (called once, with a user message if it takes one) or
    anything :func:`ctxkit.prefixcheck.prefix_segments` reads."""
    return scan_segments(_result_segments(build_or_result, provider))


# --------------------------------------------------------------------------- #
# The assertion


@dataclass(frozen=True)
class _Condition:
    name: str
    shift: dt.timedelta
    seed: int
    message: str | None
    hint: str


def _cut_at_message(segments: list[PrefixSegment], message: str | None) -> list[PrefixSegment]:
    """The conversation segment up to the line that holds this call's user message: that turn is
    new at every call and lies after what the previous call cached."""
    if message is None:
        return segments
    out = []
    for segment in segments:
        if segment.name == "messages" and segment.text is not None:
            lines = segment.text.split("\n")
            cut = next((i for i, line in enumerate(lines) if message in line), None)
            if cut is not None:
                text = "\n".join(lines[:cut])
                segment = prefix_segment(name=segment.name, hash=sha256_hex(text), tokens=estimate_tokens(text),
                                         text=text, include_text=True)
        out.append(segment)
    return out


def _duration(delta: dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    parts = [(seconds // 3600, "h"), (seconds // 60 % 60, "min"), (seconds % 60, "s")]
    return " ".join(f"{value} {unit}" for value, unit in parts if value) or "0 s"


def _explain(condition: _Condition, change: PrefixChange) -> str:
    lines = [f"[{condition.name}] {change.describe()}"]
    line = change.before if change.before is not None else change.after
    for kind, value, _ in volatile_matches(line or ""):
        lines.append(f"  the line holds {kind}: {value!r}")
    lines.append(f"  {condition.hint}")
    if change.diff:
        lines.extend("  " + line for line in change.diff.split("\n"))
    return "\n".join(lines)


def assert_prefix_stable(build: Callable[..., Any], *, provider: str | None = None,
                         clock_shift: dt.timedelta = DEFAULT_CLOCK_SHIFT,
                         messages: Sequence[str] | None = DEFAULT_MESSAGES,
                         modules: Iterable[ModuleType | str] = ()) -> list[PrefixSegment]:
    """Call ``build`` under changed conditions and fail when its cacheable prefix changes.

    ``build()`` (or ``build(user_message)`` when it takes a positional argument) returns what the
    agent would send: a ``ContextBuilder`` result, a ``Layout``, a ``Manifest`` or its prefix, or
    Anthropic / OpenAI request parameters (see :func:`ctxkit.prefixcheck.prefix_segments`;
    ``provider`` names the shape when it is ambiguous). The first call runs with the clock
    stopped now and ids drawn from one seed; then again with nothing changed (a counter or an id
    the helper cannot reseed), with the clock ``clock_shift`` later, with other random ids, and
    with ``messages[1]`` instead of ``messages[0]`` (pass ``messages=None`` to call ``build()``
    without one). The conversation from the user's message on is not compared: it follows the
    previous call's cache.

    Raises ``AssertionError`` naming, for each condition that changed the prefix, the segment,
    the line, the per-call values on it, and a unified diff. Returns the prefix's segments.
    """
    modules = list(modules)
    with_message = messages is not None and len(messages) >= 2 and _takes_message(build)
    first = messages[0] if with_message and messages else None
    start = _REAL_DATETIME.now(dt.UTC)

    def call(condition: _Condition) -> list[PrefixSegment]:
        with shifted_clock(condition.shift, start=start, build=build, modules=modules), \
                seeded_ids(condition.seed, build=build, modules=modules):
            result = build(condition.message) if with_message else build()
        return _cut_at_message(prefix_segments(result, provider=provider), condition.message)

    base = _Condition("the first call", dt.timedelta(0), _SEEDS[0], first, "")
    conditions = [
        _Condition("a second call, nothing changed", dt.timedelta(0), _SEEDS[0], first,
                   "the prefix differs between two identical calls: a counter, a random value or an id the "
                   "helper cannot reseed (pass modules=) is in the cached part"),
        _Condition(f"the clock {_duration(clock_shift)} later", clock_shift, _SEEDS[0], first,
                   "the prefix depends on the clock: move the date or time after the cached prefix "
                   "(the tail, the user message), or round it to what the agent really needs"),
        _Condition("other random ids", dt.timedelta(0), _SEEDS[1], first,
                   "the prefix holds a random id (uuid, token, random): keep ids out of the cached part"),
    ]
    if with_message and messages:
        conditions.append(_Condition("another user message", dt.timedelta(0), _SEEDS[0], messages[1],
                                     "the prefix depends on the user's message: keep it after the cached prefix"))
    baseline = call(base)
    if not baseline:
        raise AssertionError("no cacheable prefix: the build has no HEAD segments, system prompt, tools or "
                             "cache breakpoint to check")
    failures = []
    for condition in conditions:
        change = compare_prefixes(baseline, call(condition))
        if change is not None:
            failures.append(_explain(condition, change))
            if condition is conditions[0]:  # state that changes every call: the other conditions cannot tell
                failures.append("(the other conditions were not tried: two identical calls already differ)")
                break
    if failures:
        raise AssertionError("prefix not stable: the cacheable prefix changed when the build was called again\n"
                             + "\n".join(failures))
    return baseline
