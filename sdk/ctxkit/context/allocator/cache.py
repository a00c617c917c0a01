"""What the allocator learns about a segment's text, kept across ``allocate`` calls.

An agent allocates again at every step over mostly the same texts (system prompt, tools, task,
history, earlier tool results). Their content key (NFKC, casefold, sha256), CJK count and
line dedupe are pure functions of the text, so they are computed once and looked up after
that; only the work that depends on the grant runs every call. The cache is bounded by the
characters it holds (oldest entries leave first) and is safe to share between threads: an
entry is written whole, and a race at worst computes the same facts twice.

The same holds for the budget-independent half of ``extract``, ``summarize`` (lines ranked,
their costs) and ``schema`` (each step rendered and counted, as far as a cut has needed):
``plan`` keeps it, and only the cut at this call's grant is redone.

``facts(text, repeats) -> TextFacts``; ``plan(key) -> plan | None``, ``keep_plan(key, text,
plan)``; ``stats() -> dict``; ``clear()``
empties both (a benchmark of the cold path, tests); ``MAX_CHARS`` bounds each (past it the
oldest entries are evicted; it never refuses).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

import msgspec

from ctxkit.context.operators.dedupe import content_key, key_and_repeats, keys_and_repeats
from ctxkit.context.tokens import count_cjk, count_cjk_many

# About 4 MB-16 MB of text, depending on the script: a long agent context several times over.
MAX_CHARS = 4_000_000


class TextFacts(msgspec.Struct, frozen=True, gc=False):
    """Facts about one text. ``repeats`` is ``line_repeats(text)`` (deduped text, removed
    pairs) when asked for; ``deduped_cjk`` the CJK count of that deduped text. Frozen (entries
    are shared) and untracked by the cyclic collector (it holds strings and counts): an agent's
    first call makes one per text."""

    key: str
    cjk: int
    json_like: bool
    repeats: tuple[str, list[list[int]]] | None = None
    deduped_cjk: int = 0


V = TypeVar("V")


class _Bounded(Generic[V]):
    """A dict bounded by the characters of text its entries stand for; oldest entries leave first."""

    def __init__(self) -> None:
        self.entries: dict[Hashable, tuple[int, V]] = {}
        self.chars = 0
        self.lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        hit = self.entries.get(key)
        return None if hit is None else hit[1]

    def put(self, key: Hashable, size: int, value: V) -> None:
        with self.lock:
            old = self.entries.pop(key, None)
            if old is not None:
                self.chars -= old[0]
            self.entries[key] = (size + 1, value)
            self.chars += size + 1
            while self.chars > MAX_CHARS and self.entries:
                oldest = next(iter(self.entries))
                self.chars -= self.entries.pop(oldest)[0]

    def put_sized(self, new: dict[Hashable, tuple[int, V]]) -> None:
        """``put(key, size - 1, value)`` for each ``key: (size, value)`` of ``new``, under one lock."""
        with self.lock:
            entries = self.entries
            if entries:
                for key in [key for key in new if key in entries]:  # refreshed: counted again below
                    self.chars -= entries.pop(key)[0]
            entries.update(new)
            self.chars += sum([size for size, _ in new.values()])
            while self.chars > MAX_CHARS and entries:
                self.chars -= entries.pop(next(iter(entries)))[0]

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.chars = 0


_facts: _Bounded[TextFacts] = _Bounded()
_plans: _Bounded[object] = _Bounded()


def facts(text: str, repeats: bool) -> TextFacts:
    """The facts of ``text``; with ``repeats``, line dedupe too (unless the text looks like JSON,
    where dropping a repeated line would break it). Callers must not mutate ``repeats``."""
    known = _facts.get(text)
    if known is not None and (known.repeats is not None or not repeats or known.json_like):
        return known
    json_like = text.lstrip()[:1] in ("{", "[")
    if repeats and not json_like:
        key, out, removed = key_and_repeats(text)
        new = TextFacts(key, count_cjk(text), json_like, (out, removed), count_cjk(out) if removed else 0)
    else:
        new = TextFacts(content_key(text), count_cjk(text), json_like)
    _facts.put(text, len(text), new)
    return new


_JSON_START = ("{", "[")


def facts_many(texts: Sequence[str], repeats: Sequence[bool]) -> list[TextFacts]:
    """``[facts(text, r) for text, r in zip(texts, repeats)]``; the texts not known yet are worked
    out together (one fold, one CJK scan over all of them: an agent's first call)."""
    found: list[TextFacts | None] = []
    todo: dict[str, bool] = {}  # new text -> line dedupe wanted (a text may come twice)
    get = _facts.entries.get
    for text, wanted in zip(texts, repeats, strict=True):
        hit = get(text)
        if hit is not None:
            known = hit[1]
            if known.repeats is not None or not wanted or known.json_like:
                found.append(known)
                continue
        found.append(None)
        if wanted or text not in todo:
            todo[text] = wanted
    made: dict[Hashable, tuple[int, TextFacts]] = {}
    if todo:
        _python_facts(list(todo), list(todo.values()), made)
        _facts.put_sized(made)
    return [f if f is not None else made[text][1] for f, text in zip(found, texts, strict=True)]


def _python_facts(new_texts: list[str], wanted: list[bool], made: dict[Hashable, tuple[int, TextFacts]]) -> None:
    """The facts of ``new_texts`` (none of them known) into ``made``, as the cache's ``(size, facts)`` entries."""
    # text.lstrip()[:1] in ("{", "[") as facts() has it, without copying a text that starts with no space
    json_like = [(text.lstrip()[:1] if text[:1].isspace() else text[:1]) in _JSON_START for text in new_texts]
    wants = [want and not js for want, js in zip(wanted, json_like, strict=True)]
    keyed = keys_and_repeats(new_texts, wants)
    # The CJK counts of the new texts and of their line-deduped forms, in one scan.
    deduped = [rep[0] for _, rep in keyed if rep is not None and rep[1]]
    cjk = count_cjk_many(new_texts + deduped if deduped else new_texts)
    deduped_cjk = iter(cjk[len(new_texts):])
    for text, (key, rep), n, js in zip(new_texts, keyed, cjk, json_like, strict=False):  # cjk may be longer
        made[text] = (len(text) + 1, TextFacts(key, n, js, rep, next(deduped_cjk) if rep is not None and rep[1] else 0))


def plan(key: Hashable) -> object | None:
    """The plan (``LinePlan``, ``SchemaPlan``) kept for ``key``, or None. The key must hold
    everything the plan depends on besides the (default) estimator: policy, text, pinned
    lines, keep_recent."""
    hit = _plans.entries.get(key)
    return None if hit is None else hit[1]


def keep_plan(key: Hashable, text: str, made: object) -> None:
    """Keep ``made``, the plan for ``key``, whose text is ``text`` (its size counts to the bound)."""
    _plans.put(key, len(text), made)


def stats() -> dict[str, int]:
    """How much is kept: entries and characters of text, for facts and for plans."""
    return {"facts": len(_facts.entries), "facts_chars": _facts.chars, "plans": len(_plans.entries),
            "plans_chars": _plans.chars}


def clear() -> None:
    """Forget everything (the next call pays the full cost again)."""
    _facts.clear()
    _plans.clear()
