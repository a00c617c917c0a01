"""Lossless and provenance-keeping operators: exact dedupe and near-duplicate merging.

Re-exported by ``ctxkit.context.operators``; see its docstring for the API.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ctxkit.context.operators.common import OpRecord
from ctxkit.context.tokens import Estimator, estimate_tokens

# Fullwidth punctuation common in Chinese text, and the ideographic space, with their NFKC
# forms (each is the character's full compatibility decomposition).
_WIDE = tuple((chr(c), chr(c - 0xFEE0)) for c in (0xFF0C, 0xFF1A, 0xFF1B, 0xFF08, 0xFF09, 0xFF01, 0xFF1F, 0xFF05))
_WIDE += (("\u3000", " "),)


def _nfkc(text: str) -> str:
    """``unicodedata.normalize("NFKC", text)``, faster on typical Chinese text (:func:`_quick_nfkc`)."""
    quick = _quick_nfkc(text)
    return quick if quick is not None else unicodedata.normalize("NFKC", text)


def _quick_nfkc(text: str) -> str | None:
    """The NFKC form of ``text`` when it is found without a full NFKC pass, else None.

    A full NFKC pass is slow and one fullwidth comma is enough to
    force it. Replacing a character by its full compatibility decomposition does not change
    the NFKD of a string, so it does not change its NFKC either; when those replacements
    leave the text normalized (the quick check answers that), that text is the NFKC form.
    """
    if unicodedata.is_normalized("NFKC", text):
        return text
    for wide, narrow in _WIDE:
        if wide in text:
            text = text.replace(wide, narrow)
    return text if unicodedata.is_normalized("NFKC", text) else None


def _fold(text: str) -> str:
    """NFKC then casefold; line feeds stay where they were (see :func:`_line_forms`)."""
    if not text.isascii():  # NFKC is the identity on ASCII; skip the call on the common path
        text = _nfkc(text)
    return text.casefold()


# ASCII whitespace other than the space and the line feed (what str.split() also splits at).
_OTHER_ASCII_SPACE = "\t\x0b\x0c\r\x1c\x1d\x1e\x1f"


def _spaces_only(flat: str) -> bool:
    """Whether every whitespace character of ``flat``, a text whose line feeds were made spaces,
    is a space (when False, it may still be so: the callers then take their slow, exact path).
    On ASCII text, a search for each other ASCII whitespace character; else ``isprintable()``,
    false for every whitespace character but the space, which looks each character up."""
    if flat.isascii():
        return not any(space in flat for space in _OTHER_ASCII_SPACE)
    return flat.isprintable()


def _normal_form(folded: str) -> tuple[str, bool]:
    """``(" ".join(folded.split()), simple)`` for a folded text (:func:`_fold`).

    ``simple``: the text's only whitespace is spaces and line feeds, never two in a row (no
    double space once line feeds are spaces). Such a text collapses to itself minus a space at
    either end, without a split; and no space touches a line feed, so each of its lines is its
    own normal form but for a space at the text's either end (:func:`_line_forms`).
    """
    flat = folded.replace("\n", " ")  # (the same string when it holds no line feed)
    if "  " not in flat and _spaces_only(flat):
        return flat.strip(" "), True
    return " ".join(folded.split()), False


def normalize(text: str) -> str:
    """NFKC (full/half width), casefold, collapse whitespace: the dedupe normal form."""
    return _normal_form(_fold(text))[0]


def _line_forms(text: str, folded: str, simple: bool) -> list[str]:
    """``[normalize(line) for line in text.split("\\n")]``, given ``folded = _fold(text)`` and
    ``simple`` from :func:`_normal_form` of it.

    NFKC never composes across a line feed (a starter that combines with nothing) and never
    produces one, casefold maps each character on its own, so the folded text split at its
    line feeds gives the folded lines; the lines of a simple text need no whitespace work.
    """
    parts = folded.split("\n")
    # Cannot happen (see above; ASCII text folds character by character); stay correct if it ever did.
    if not text.isascii() and len(parts) != text.count("\n") + 1:
        return [normalize(line) for line in text.split("\n")]
    if not simple:
        return [" ".join(line.split()) for line in parts]
    if folded[:1] == " " or folded[-1:] == " ":  # only the first and the last line can have an edge space
        return [line.strip(" ") for line in parts]
    return parts


def _digest(normal: str) -> str:
    return hashlib.sha256(normal.encode("utf-8")).hexdigest()[:16]


def content_key(text: str) -> str:
    return _digest(normalize(text))


def line_repeats(text: str, *, min_chars: int = 16) -> tuple[str, list[list[int]]]:
    """The text work of :func:`dedupe_lines`: ``(text without repeated lines, [[line, first line], ...])``.

    Lines shorter than ``min_chars`` once normalized always stay. No token counting, so the
    result depends on the text alone (the allocator keeps it across calls).
    """
    if "\n" not in text:  # one line cannot repeat
        return text, []
    folded = _fold(text)
    return _repeats(text, _line_forms(text, folded, _normal_form(folded)[1]), min_chars)


def _repeats(text: str, norms: list[str], min_chars: int) -> tuple[str, list[list[int]]]:
    """:func:`line_repeats` of ``text`` given the normal forms of its lines."""
    if len(set(norms)) == len(norms):  # every line distinct: nothing to remove (the common case)
        return text, []
    seen: dict[str, int] = {}
    kept: list[str] = []
    removed: list[list[int]] = []  # [line, first line with the same content]
    for number, (line, norm) in enumerate(zip(text.split("\n"), norms, strict=True), start=1):
        if len(norm) >= min_chars:
            if norm in seen:
                removed.append([number, seen[norm]])
                continue
            seen[norm] = number
        kept.append(line)
    return ("\n".join(kept) if removed else text), removed


def _key_and_repeats(text: str, min_chars: int, folded: str | None = None) -> tuple[str, tuple[str, list[list[int]]]]:
    """``(content_key(text), line_repeats(text))`` from one NFKC/casefold pass and one whitespace
    check of the text (``folded``: ``_fold(text)``, when the caller has it)."""
    if folded is None:
        folded = _fold(text)
    normal, simple = _normal_form(folded)
    if "\n" not in text:  # one line cannot repeat
        return _digest(normal), (text, [])
    return _digest(normal), _repeats(text, _line_forms(text, folded, simple), min_chars)


def key_and_repeats(text: str, *, min_chars: int = 16) -> tuple[str, str, list[list[int]]]:
    """``content_key(text)`` and ``line_repeats(text)`` with one NFKC/casefold pass over the text."""
    key, (out, removed) = _key_and_repeats(text, min_chars)
    return key, out, removed


# Joins texts for one fold over many: NFKC never composes across it (a starter that combines with
# nothing), never produces it, and casefold maps it to itself; a text holding one is folded apart.
_SEP = "\x00"


def _fold_many(texts: Sequence[str]) -> list[str]:
    """``[_fold(text) for text in texts]``: each ASCII text on its own (casefold is fast on ASCII
    text, and joined with CJK text it would lose that), the others in one pass over them joined
    (an agent's first call brings a couple of hundred new texts, and per text that work is mostly
    call overhead). When the join needs a full NFKC pass, each text pays for its own instead."""
    wide = [text for text in texts if not text.isascii()]
    if len(wide) > 1:
        normalized = _quick_nfkc(_SEP.join(wide))
        folded = normalized.casefold().split(_SEP) if normalized is not None else []
        if len(folded) == len(wide):  # else a text holds the separator, or one needs a full NFKC pass
            folded_wide = iter(folded)
            return [text.casefold() if text.isascii() else next(folded_wide) for text in texts]
    return [_fold(text) for text in texts]


def keys_and_repeats(
    texts: Sequence[str], repeats: Sequence[bool], *, min_chars: int = 16
) -> list[tuple[str, tuple[str, list[list[int]]] | None]]:
    """``(content_key(text), line_repeats(text) if wanted else None)`` for many texts, folded
    together (:func:`_fold_many`)."""
    return [
        _key_and_repeats(text, min_chars, folded) if wanted else (_digest(_normal_form(folded)[0]), None)
        for text, folded, wanted in zip(texts, _fold_many(texts), repeats, strict=True)
    ]


def dedupe_record(text: str, out: str, removed: list[list[int]], estimate: Estimator = estimate_tokens) -> OpRecord:
    """The record :func:`dedupe_lines` returns for ``line_repeats(text) == (out, removed)``."""
    before = estimate(text)
    if not removed:
        return OpRecord("dedupe", before, before, "no duplicates", {"removed": []})
    after = estimate(out)
    detail = f"removed {len(removed)} duplicate lines, saved {before - after} tokens"
    return OpRecord("dedupe", before, after, detail, {"removed": [list(pair) for pair in removed]})


def dedupe_lines(text: str, *, min_chars: int = 16, estimate: Estimator = estimate_tokens) -> tuple[str, OpRecord]:
    """Remove exact repeats of lines (after normalization); the first occurrence stays."""
    out, removed = line_repeats(text, min_chars=min_chars)
    return out, dedupe_record(text, out, removed, estimate)


def dedupe_items(items: Sequence[tuple[str, str]]) -> tuple[list[str], dict[str, str], OpRecord]:
    """Exact duplicates among items (e.g. a chunk retrieved twice): the first id stays."""
    first: dict[str, str] = {}
    kept: list[str] = []
    duplicate_of: dict[str, str] = {}
    for item_id, text in items:
        key = content_key(text)
        if key in first:
            duplicate_of[item_id] = first[key]
        else:
            first[key] = item_id
            kept.append(item_id)
    detail = f"{len(duplicate_of)} duplicate items" if duplicate_of else "no duplicates"
    return kept, duplicate_of, OpRecord("dedupe", len(items), len(kept), detail, {"duplicate_of": duplicate_of})


# --------------------------------------------------------------------------- #
# Near duplicates


def shingles(text: str, k: int = 5) -> set[str]:
    norm = normalize(text)
    return {norm[i : i + k] for i in range(max(0, len(norm) - k + 1))}


def jaccard_5gram(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb) if sa and sb else 0.0


def near_duplicate_pairs(texts: Sequence[str], threshold: float = 0.75, k: int = 5) -> list[tuple[int, int, float]]:
    """All pairs ``(i, j, jaccard)`` with i < j and Jaccard >= threshold.

    Prefix filtering (AllPairs): order shingles rarest first; if J(A, B) >= t then the
    first ``|A| - ceil(t|A|) + 1`` shingles of A and the matching prefix of B share one.
    Only pairs sharing a prefix shingle are compared exactly, so unrelated texts cost
    nothing beyond building their shingle sets.
    """
    sets = [shingles(t, k) for t in texts]
    df: Counter[str] = Counter()
    for s in sets:
        df.update(s)
    index: dict[str, list[int]] = {}
    pairs: list[tuple[int, int, float]] = []
    for j, s in enumerate(sets):
        if not s:
            continue
        ordered = sorted(s, key=lambda g: (df[g], g))
        prefix = ordered[: len(s) - math.ceil(threshold * len(s) - 1e-9) + 1]
        candidates: set[int] = set()
        for g in prefix:
            candidates.update(index.get(g, ()))
        for i in sorted(candidates):
            small, large = sorted((len(sets[i]), len(s)))
            if small < threshold * large - 1e-9:
                continue
            score = len(sets[i] & s) / len(sets[i] | s)
            if score >= threshold:
                pairs.append((i, j, round(score, 4)))
        for g in prefix:
            index.setdefault(g, []).append(j)
    pairs.sort()
    return pairs


@dataclass(frozen=True, slots=True)
class Merged:
    """An item that survived near-dedupe, with every source it now stands for."""

    id: str
    text: str
    sources: tuple[str, ...]
    similarity: dict[str, float] = field(default_factory=dict)


def merge_near_duplicates(
    items: Sequence[tuple[str, str]], threshold: float = 0.75
) -> tuple[list[Merged], OpRecord]:
    """Keep the first of each near-duplicate pair and merge the other's provenance into it.

    An item is merged only into an item it is itself similar to (no chaining through a
    merged item), so a chain A~B~C with A !~ C keeps A and C.
    """
    pairs = near_duplicate_pairs([text for _, text in items], threshold)
    merged_into: dict[int, tuple[int, float]] = {}
    for i, j, score in pairs:  # sorted by i, so j goes to its earliest surviving match
        if j not in merged_into and i not in merged_into:
            merged_into[j] = (i, score)
    sources: dict[int, list[str]] = {i: [item_id] for i, (item_id, _) in enumerate(items)}
    sims: dict[int, dict[str, float]] = {i: {} for i in range(len(items))}
    for j, (i, score) in sorted(merged_into.items()):
        sources[i].append(items[j][0])
        sims[i][items[j][0]] = score
    out = [
        Merged(item_id, text, tuple(sources[i]), sims[i])
        for i, (item_id, text) in enumerate(items)
        if i not in merged_into
    ]
    data = {items[j][0]: {"into": items[i][0], "jaccard": s} for j, (i, s) in merged_into.items()}
    detail = f"merged {len(merged_into)} near-duplicates (jaccard >= {threshold})" if data else "no near-duplicates"
    return out, OpRecord("near_dedupe", len(items), len(out), detail, {"merged": data})


def merge_near_duplicate_lines(
    text: str, *, threshold: float = 0.75, min_chars: int = 24, estimate: Estimator = estimate_tokens
) -> tuple[str, OpRecord]:
    """Merge near-duplicate lines: the first stays, annotated with the lines it now covers."""
    before = estimate(text)
    lines = text.split("\n")
    folded = _fold(text)
    norms = _line_forms(text, folded, _normal_form(folded)[1])
    candidates = [n for n, norm in enumerate(norms) if len(norm) >= min_chars]
    if len(candidates) < 2:  # nothing to pair up
        return text, OpRecord("near_dedupe", before, before, "no near-duplicates")
    items = [(str(n + 1), lines[n]) for n in candidates]
    merged, record = merge_near_duplicates(items, threshold)
    if not record.data["merged"]:
        return text, OpRecord("near_dedupe", before, before, "no near-duplicates")
    dropped = {int(key) - 1 for key in record.data["merged"]}
    notes = {int(m.id) - 1: m.sources[1:] for m in merged if len(m.sources) > 1}
    out_lines = []
    for n, line in enumerate(lines):
        if n in dropped:
            continue
        if n in notes:
            line = f"{line}  [near-duplicate of line(s) {', '.join(notes[n])} merged here]"
        out_lines.append(line)
    out = "\n".join(out_lines)
    after = estimate(out)
    return out, OpRecord("near_dedupe", before, after, record.detail + f", saved {before - after} tokens", record.data)
