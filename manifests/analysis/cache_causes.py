"""The cause of one call's cache outcome (docs/analysis.md, "Within a run: a cause for every
call"): a table of rules, each a small function that looks at the call and the call it is
compared with and either gives the cause or passes; the first that gives one decides.

:data:`RULES` lists them in the order they are tried, which is the order of the doc's table
of rules. cache.py compares each call with the previous call of its run (or, for a run's first
call, with another run's) and stores the cause as a CacheEvent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from manifests.analysis import cache_words
from manifests.analysis.prices import Price
from manifests.models import CacheEvent


def first_changed_segment(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> tuple[str, str]:
    """(segment name, how) of the first prefix segment that differs: the cache holds up to
    there and is lost after it. ('', ...) when the segments do not show the change."""
    for n in range(max(len(before), len(after))):
        old = before[n] if n < len(before) else None
        new = after[n] if n < len(after) else None
        if old is None:
            assert new is not None  # n is below the length of one of them
            return str(new["name"]), f"segment {new['name']!r} was added"
        if new is None:
            return str(old["name"]), f"segment {old['name']!r} was removed"
        if old.get("name") != new.get("name"):
            if new.get("name") not in {s.get("name") for s in before}:
                return str(new["name"]), f"segment {new['name']!r} was added"
            if old.get("name") not in {s.get("name") for s in after}:
                return str(old["name"]), f"segment {old['name']!r} was removed"
            return str(new["name"]), f"segments reordered: {new['name']!r} now where {old['name']!r} was"
        if old.get("hash") != new.get("hash"):
            return str(new["name"]), f"segment {new['name']!r} changed (hash {_short(old.get('hash'))} -> " \
                f"{_short(new.get('hash'))})"
    return "", "the prefix hash changed but its segments do not show where"


def prefix_extension(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> str:
    """How ``after`` only appends to ``before`` (lines at the end of its last segment, segments
    after it), or "" when it changes anything ``before`` held. A grown prefix still starts with
    what the previous call wrote, so that part can be read: an agent that puts its cache
    breakpoint on the newest message grows the ``messages`` segment at every call. Growth within
    a segment is seen only through its line hashes; without them the change counts as a change."""
    if not before or len(after) < len(before):
        return ""
    last = len(before) - 1
    for old, new in zip(before[:last], after[:last], strict=True):
        if old.get("name") != new.get("name") or old.get("hash") != new.get("hash"):
            return ""
    old, new = before[last], after[last]
    if old.get("name") != new.get("name"):
        return ""
    added = [str(s.get("name")) for s in after[last + 1:]]
    grown = ""
    if old.get("hash") != new.get("hash"):
        old_lines, new_lines = old.get("lines") or [], new.get("lines") or []
        if not old_lines or len(new_lines) <= len(old_lines) or new_lines[: len(old_lines)] != old_lines:
            return ""
        grown = f"segment {old.get('name')!r} gained {len(new_lines) - len(old_lines)} lines at its end"
    if len(added) == 1:
        grown = "; ".join(filter(None, [grown, f"segment {added[0]!r} was added after it"]))
    elif added:
        grown = "; ".join(filter(None, [grown, f"segments {', '.join(map(repr, added))} were added after it"]))
    return grown


def _short(value: Any) -> str:
    return str(value or "")[:12]


def _gap(call: dict[str, Any], prev: dict[str, Any]) -> float:
    """Seconds between the previous call (its end when known: the cache was last used
    then) and the start of this one."""
    last_use: datetime = prev["ended_at"] or prev["started_at"]
    gap: float = (call["started_at"] - last_use).total_seconds()
    return gap


def _ttl(call: dict[str, Any], prev: dict[str, Any], prices_entry: Any) -> int:
    """The TTL in force over the gap: the one the previous call (which wrote the cache)
    recorded, else this call's, else the price book's for the model."""
    return int(prev.get("cache_ttl_seconds") or call.get("cache_ttl_seconds") or prices_entry.cache_ttl_seconds)


def _ttl_words(call: dict[str, Any], prev: dict[str, Any], ttl: int) -> str:
    """The TTL of :func:`_ttl` and where it came from: the request's cache_control (a call
    recorded by ctxkit.instrument or ctxkit proxy), the agent, or the price table."""
    recorder = prev if prev.get("cache_ttl_seconds") else call if call.get("cache_ttl_seconds") else None
    if recorder is None:
        return cache_words.ttl(ttl, recorded=False, builder="")
    return cache_words.ttl(ttl, recorded=True, builder=str(recorder.get("builder_name") or ""))


def _changed_words(call: dict[str, Any], prev: dict[str, Any], segment: str, *, across_runs: bool = False) -> str:
    """The change in ``segment`` told by what changed in it (cache_words), or "" when its lines
    do not show it. Messages words only when the previous call cached messages: a messages
    segment that appeared where another was is told by the segments."""
    before, after = prev["prefix_segments"] or [], call["prefix_segments"] or []
    if segment not in ("tools", "messages") and not all(
            any(isinstance(s, dict) and s.get("name") == segment for s in side) for side in (before, after)):
        return ""
    if segment == "messages" and not any(isinstance(s, dict) and s.get("name") == segment for s in before):
        return ""
    return cache_words.prefix_change(before, after, segment, edits=call.get("context_edits") or (),
                                     compactions=call.get("compactions") or (),
                                     previous_compactions=prev.get("compactions") or (), across_runs=across_runs)


def _only_messages_differ(prev: dict[str, Any], call: dict[str, Any]) -> bool:
    """Whether two prefixes are the same up to a ``messages`` segment, the conversation that
    another run does not share (its first changed segment is ``messages``)."""
    return first_changed_segment(prev["prefix_segments"] or [], call["prefix_segments"] or [])[0] == "messages"


@dataclass(frozen=True)
class Verdict:
    """A rule's answer: the cause, its words, the segment it names."""

    cause: str
    detail: str
    segment: str = ""
    # The detail names the call it was compared with already (so no "since ...:" before it).
    names_previous: bool = False


@dataclass
class Seen:
    """What the rules look at: the call, the call it is compared with (``prev``: the previous
    call of its run, another run's call when ``across``, None for a first call without one)
    and the figures they share, each worked out once when a rule first asks."""

    call: dict[str, Any]
    prev: dict[str, Any] | None
    price: Price
    across: bool = False
    who: str = "the previous call"  # the compared call, in words

    @property
    def previous(self) -> dict[str, Any]:
        """``prev``, for the rules after :func:`first_call`, which sees to it that there is one."""
        assert self.prev is not None
        return self.prev

    @property
    def read(self) -> int:
        return int(self.call["cache_read_tokens"])

    @property
    def cacheable(self) -> int:
        """What could have been cached: the declared stable prefix, else the whole input."""
        return int(self.call["prefix_tokens"] if self.call["prefix_hash"] else self.call["input_tokens"])

    @cached_property
    def gap(self) -> float | None:
        return None if self.prev is None else _gap(self.call, self.prev)

    @cached_property
    def hashes_differ(self) -> bool:
        return bool(self.call["prefix_hash"] and self.previous["prefix_hash"]
                    and self.call["prefix_hash"] != self.previous["prefix_hash"])

    @cached_property
    def grew(self) -> str:
        """How the prefix grew from the previous call's, when that is all that changed; "" otherwise."""
        if not self.hashes_differ:
            return ""
        return prefix_extension(self.previous["prefix_segments"] or [], self.call["prefix_segments"] or [])

    @cached_property
    def conversation(self) -> bool:
        """Across runs: the prefixes differ from their messages segment on (each run's own conversation)."""
        return self.hashes_differ and not self.grew and self.across and _only_messages_differ(self.previous,
                                                                                                self.call)


Rule = Callable[[Seen], Verdict | None]


def below_minimum(seen: Seen) -> Verdict | None:
    """Nothing read, and a cacheable prefix shorter than the provider's minimum: never cached."""
    minimum = seen.price.min_cacheable_tokens
    if seen.read or seen.cacheable >= minimum:
        return None
    return Verdict(CacheEvent.BELOW_MINIMUM, f"the cacheable prefix ({seen.cacheable} tokens) is below the "
                                             f"provider's minimum ({minimum}): it is never cached")


def first_call(seen: Seen) -> Verdict | None:
    """A run's first call with no call to compare with: a hit from a cache another run warmed,
    else a cold start."""
    if seen.prev is not None:
        return None
    if seen.read:
        return Verdict(CacheEvent.HIT, "first call of the run, cache warm from another run")
    return Verdict(CacheEvent.COLD_START, "first call of the run: nothing cached yet")


def model_changed(seen: Seen) -> Verdict | None:
    """Another model than the previous call's: each model has its own cache."""
    before, now = seen.previous["model"], seen.call["model"]
    if before == now:
        return None
    return Verdict(CacheEvent.PREFIX_CHANGED, f"the model changed ({before} → {now}): each model has its own "
                                              "cache, so nothing the previous call wrote can be read", "model")


def prefix_changed(seen: Seen) -> Verdict | None:
    """A prefix hash that differs other than by growing at its end (or, across runs, from the
    messages segment on): the first segment that changed, in the words of what changed in it."""
    if not seen.hashes_differ or seen.grew or seen.conversation:
        return None
    segment, how = first_changed_segment(seen.previous["prefix_segments"] or [], seen.call["prefix_segments"] or [])
    words = _changed_words(seen.call, seen.previous, segment, across_runs=seen.across) if segment else ""
    return Verdict(CacheEvent.PREFIX_CHANGED, f"{words or how}; the cache is lost from there on", segment)


def hit(seen: Seen) -> Verdict | None:
    """Read from the cache with the previous call's prefix, or one that only grew from it."""
    if not seen.read:
        return None
    if seen.grew:
        return Verdict(CacheEvent.HIT, f"the prefix grew ({seen.grew}): it starts with the previous call's, "
                                       "read from the cache")
    return Verdict(CacheEvent.HIT, "same prefix as the previous call, read from the cache")


def ttl_expired(seen: Seen) -> Verdict | None:
    """Nothing read after a gap longer than the cache TTL in force; an expected miss when the
    request or the agent recorded that TTL."""
    ttl = _ttl(seen.call, seen.previous, seen.price)
    if seen.gap is None or seen.gap <= ttl:
        return None
    in_force = _ttl_words(seen.call, seen.previous, ttl)
    detail = f"{seen.gap:.0f}s since {seen.who}, longer than the cache TTL ({in_force})"
    if seen.previous.get("cache_ttl_seconds") or seen.call.get("cache_ttl_seconds"):
        detail += ": an expected miss"
    return Verdict(CacheEvent.TTL_EXPIRED, detail, names_previous=True)


def cleared_by_provider(seen: Seen) -> Verdict | None:
    """Within a run, a request that only grew but read nothing, with a context edit and cached
    messages: the provider cleared earlier messages before the model read them."""
    edits = seen.call.get("context_edits")
    if seen.across or not edits or not any(
            isinstance(s, dict) and s.get("name") == "messages" for s in seen.call["prefix_segments"] or []):
        return None
    return Verdict(CacheEvent.PREFIX_CHANGED,
                   f"{cache_words.cleared_by_provider(edits)}; the cache is lost from there on", "messages")


def cold_start(seen: Seen) -> Verdict:
    """Anything else: the same prefix within the TTL and nothing read."""
    same = (f"a prefix that starts with the previous call's ({seen.grew})" if seen.grew
            else "same prefix up to its messages (each run has its own conversation)" if seen.conversation
            else "same prefix")
    return Verdict(CacheEvent.COLD_START,
                   f"{same} within the TTL but nothing was read: the previous call did not write the cache")


# Tried in this order; the first rule that gives a cause decides, and cold_start always gives one.
RULES: tuple[Rule, ...] = (below_minimum, first_call, model_changed, prefix_changed, hit, ttl_expired,
                           cleared_by_provider, cold_start)


def cause_of(seen: Seen) -> Verdict:
    """The verdict of the first rule of :data:`RULES` that gives one."""
    return next(filter(None, (rule(seen) for rule in RULES)))
