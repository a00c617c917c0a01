"""Context operators, safest first (seed 001, 5.3-5.5): dedupe, ref, extract, summarize, truncate, window.

API notes
---------
Every operator is deterministic, takes an ``estimate`` (default :func:`ctxkit.tokens.estimate_tokens`)
and returns ``(result, OpRecord)``; the record says what was done, tokens before/after, and
details (removed lines, merged sources, omitted tokens) for the manifest's ``reason``. Every
operator that takes a ``budget`` returns text whose estimate is ``<= budget`` (possibly ``""``).

- ``normalize(text) -> str`` / ``content_key(text) -> str``: NFKC + casefold + whitespace
  collapse, then sha256 (16 hex chars). The exact-dedupe key.
- ``dedupe_lines(text, *, min_chars=16, estimate) -> (str, OpRecord)``: drop exact repeated
  lines (normalized), keep the first. Lines shorter than ``min_chars`` (``}``, ``OK``) stay.
- ``dedupe_items(items: Sequence[tuple[id, text]]) -> (kept_ids, duplicate_of, OpRecord)``.
- ``shingles(text, k=5)``, ``jaccard_5gram(a, b)``, ``near_duplicate_pairs(texts, threshold=0.75, k=5)``:
  character 5-gram Jaccard; pairs are found with prefix filtering, not all-pairs comparison.
- ``merge_near_duplicates(items: Sequence[tuple[id, text]], threshold=0.75) -> (list[Merged], OpRecord)``
  and ``merge_near_duplicate_lines(text, ...)``: keep the first of a near-duplicate pair and
  record both sources. Never a silent delete (two near-identical log lines may differ in the
  one timestamp that explains a failure).
- ``score_line(line) -> int``: the seed's extraction score (numbers, negations/constraints,
  units, refs, failure hints, key=value).
- ``extract_lines(text, budget, *, ref=None, pinned=(), estimate)``: best-scoring lines in
  original order plus one omission marker.
- ``summarize_lines(text, budget, *, keep_recent=3, ref=None, pinned=(), estimate)``:
  deterministic extractive summary: failure evidence from older lines + the most recent lines.
- ``ref_replace(text, *, ref, why="", lines=None, estimate)``: a JSON coordinate (ref, lines,
  sha256, tokens, why) instead of the text.
- ``truncate_head_tail(text, budget, *, ref=None, head_ratio=0.55, estimate)``: head/tail with a
  marker ``…[omitted N tokens; ref=...]``; idempotent; JSON input stays valid JSON.
- ``sliding_window(turns, *, budget=None, max_turns=None, pinned=(), estimate)``: pinned lines,
  one summary line of what rolled out, then the newest turns.
- ``compress_schema(text, budget, *, estimate)``: tool schemas: compact JSON, then drop parameter
  descriptions, then tool descriptions, then optional parameters, then trailing tools.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxkit.tokens import Estimator, clip, estimate_tokens

# The seed's safe-first order: lossless before recoverable before lossy.
SAFE_ORDER = ("dedupe", "ref", "extract", "summarize", "truncate", "window", "hard_cut")


@dataclass(frozen=True, slots=True)
class OpRecord:
    """What one operator did."""

    op: str
    tokens_before: int
    tokens_after: int
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "detail": self.detail,
            "data": self.data,
        }


# --------------------------------------------------------------------------- #
# Exact dedupe


def normalize(text: str) -> str:
    """NFKC (full/half width), casefold, collapse whitespace: the dedupe normal form."""
    if not text.isascii():  # NFKC is the identity on ASCII; skip the call on the common path
        text = unicodedata.normalize("NFKC", text)
    return " ".join(text.casefold().split())


def content_key(text: str) -> str:
    return hashlib.sha256(normalize(text).encode("utf-8")).hexdigest()[:16]


def dedupe_lines(text: str, *, min_chars: int = 16, estimate: Estimator = estimate_tokens) -> tuple[str, OpRecord]:
    """Remove exact repeats of lines (after normalization); the first occurrence stays."""
    if "\n" not in text:  # one line cannot repeat
        before = estimate(text)
        return text, OpRecord("dedupe", before, before, "no duplicates", {"removed": []})
    before = estimate(text)
    seen: dict[str, int] = {}
    kept: list[str] = []
    removed: list[list[int]] = []  # [line, first line with the same content]
    for number, line in enumerate(text.split("\n"), start=1):
        norm = normalize(line)
        if len(norm) >= min_chars:
            if norm in seen:
                removed.append([number, seen[norm]])
                continue
            seen[norm] = number
        kept.append(line)
    out = "\n".join(kept) if removed else text
    after = estimate(out) if removed else before
    detail = f"removed {len(removed)} duplicate lines, saved {before - after} tokens" if removed else "no duplicates"
    return out, OpRecord("dedupe", before, after, detail, {"removed": removed})


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
    candidates = [n for n, line in enumerate(lines) if len(normalize(line)) >= min_chars]
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


# --------------------------------------------------------------------------- #
# Extraction and extractive summary

FAIL_HINTS = ("failed", "fail", "error", "timeout", "timed out", "429", "e_", "denied", "refused", "exception",
              "拒绝", "失败", "超时", "报错", "错误", "限流")
CONSTRAINT_HINTS = ("不", "禁止", "不得", "必须", "只能", "仅", "超过", "至少", "至多")
_CONSTRAINT_WORDS = re.compile(
    r"\b(must|never|only|not|no|don't|do not|cannot|can't|forbidden|required|at least|at most|without)\b", re.I
)
UNIT_HINTS = ("分", "秒", "％", "%", "token", "mib", "ms", "小时", "分钟", "元")
_URI = re.compile(r"[a-z][a-z0-9+.-]*://\S", re.I)
_UNIT_WORDS = re.compile(r"\d\s*(s|sec|secs|seconds|min|minutes|h|hours|kb|mb|gb|usd|cents?)\b", re.I)


def score_line(line: str) -> int:
    """Seed 5.4.1's line score, extended with English constraint words and units.

    Not precise; its value is that every kept line can say why it was kept.
    """
    score = 0
    low = line.lower()
    if any(c.isdigit() for c in line):
        score += 5  # figures, limits, amounts
    if any(h in line for h in CONSTRAINT_HINTS) or _CONSTRAINT_WORDS.search(line):
        score += 4  # negations and constraints
    if any(u in low for u in UNIT_HINTS) or _UNIT_WORDS.search(line):
        score += 3  # units
    if "://" in line or "/" in line:
        score += 2  # a ref that can be fetched again
    if _URI.search(line):
        score += 2  # a resolvable URI is worth more than a bare slash ("a / b")
    if any(h in low for h in FAIL_HINTS):
        score += 3  # failure reasons
    if "=" in line:
        score += 2  # key=value is more stable than prose
    return score


def is_failure_line(line: str) -> bool:
    low = line.lower()
    return any(h in low for h in FAIL_HINTS)


def _select_lines(
    lines: list[str],
    order: list[int],
    budget: int,
    marker: Callable[[int, int], str],
    estimate: Estimator,
    marker_first: bool,
    marker_only: bool,
) -> tuple[str, list[int], int]:
    """Take lines in ``order`` while they fit, emit them in original order with one marker.

    Per-line costs (line + newline) bound the joined text for subadditive estimators; the
    assembled text is checked anyway and trimmed from the lowest-ranked line. When no line
    fits, the marker alone is returned only if ``marker_only`` (it carries a ref worth having).
    Returns (text, kept indices, omitted tokens).
    """
    total = estimate("\n".join(lines))
    marker_cost = estimate(marker(len(lines), total)) + 1
    room = budget - marker_cost
    kept: list[int] = []
    for n in order:
        cost = estimate(lines[n] + "\n")
        if cost <= room:
            kept.append(n)
            room -= cost
    while True:
        chosen = sorted(kept)
        body = [lines[n] for n in chosen]
        omitted = max(0, total - estimate("\n".join(body))) if len(chosen) < len(lines) else 0
        if omitted:
            mark = marker(len(chosen), omitted)
            body = [mark, *body] if marker_first else [*body, mark]
        out = "\n".join(body)
        if not chosen and not marker_only:
            return "", [], total
        if estimate(out) <= budget:
            return out, chosen, omitted
        if not kept:
            return "", [], total
        kept.pop()  # the lowest-ranked line taken


def extract_lines(
    text: str,
    budget: int,
    *,
    ref: str | None = None,
    pinned: Sequence[str] = (),
    estimate: Estimator = estimate_tokens,
) -> tuple[str, OpRecord]:
    """Keep the best-scoring lines (pinned lines first) in their original order."""
    before = estimate(text)
    if before <= budget:
        return text, OpRecord("extract", before, before, "fits")
    lines = text.split("\n")
    pins = set(pinned)
    scores = [score_line(line) for line in lines]
    order = sorted(range(len(lines)), key=lambda n: (lines[n] not in pins, -scores[n], n))
    order = [n for n in order if lines[n].strip()]

    def marker(kept: int, omitted: int) -> str:
        return f"…[extracted {kept}/{len(lines)} lines; omitted {omitted} tokens; ref={ref or 'ref:unknown'}]"

    out, kept, omitted = _select_lines(lines, order, budget, marker, estimate, False, ref is not None)
    detail = f"kept {len(kept)}/{len(lines)} lines by score (numbers, negations, units, refs, failures)"
    return out, OpRecord("extract", before, estimate(out), detail, {"kept_lines": [n + 1 for n in kept],
                                                                    "omitted_tokens": omitted})


def summarize_lines(
    text: str,
    budget: int,
    *,
    keep_recent: int = 3,
    ref: str | None = None,
    pinned: Sequence[str] = (),
    estimate: Estimator = estimate_tokens,
) -> tuple[str, OpRecord]:
    """Deterministic extractive summary of a line-per-turn history.

    Rank: pinned lines, failure evidence from older lines, the ``keep_recent`` newest lines
    (newest first), then other older lines by score. Generative summaries may flip a
    negation or drop a unit (seed 5.4.1), so this one only ever copies lines.
    """
    before = estimate(text)
    if before <= budget:
        return text, OpRecord("summarize", before, before, "fits")
    lines = text.split("\n")
    live = [n for n, line in enumerate(lines) if line.strip()]
    recent = live[-keep_recent:] if keep_recent > 0 else []
    recent_set = set(recent)
    pins = set(pinned)

    def rank(n: int) -> tuple[int, int, int]:
        if lines[n] in pins:
            return (0, 0, n)
        if n not in recent_set and is_failure_line(lines[n]):
            return (1, 0, n)
        if n in recent_set:
            return (2, 0, -n)
        return (3, -score_line(lines[n]), n)

    order = sorted(live, key=rank)
    older = len(live) - len(recent)

    def marker(kept: int, omitted: int) -> str:
        head = f"[summary: {older} earlier turns condensed, failure evidence kept"
        return f"{head}; omitted {omitted} tokens; ref={ref or 'ref:unknown'}]"

    out, kept, omitted = _select_lines(lines, order, budget, marker, estimate, True, ref is not None)
    n_recent = len(recent_set.intersection(kept))
    n_fail = sum(1 for n in kept if n not in recent_set and is_failure_line(lines[n]))
    detail = f"kept {n_fail} failure-evidence lines and the last {n_recent} turns"
    return out, OpRecord("summarize", before, estimate(out), detail, {"kept_lines": [n + 1 for n in kept],
                                                                      "omitted_tokens": omitted})


# --------------------------------------------------------------------------- #
# Reference replacement


def ref_replace(
    text: str, *, ref: str | None, why: str = "", lines: str | None = None, estimate: Estimator = estimate_tokens
) -> tuple[str, OpRecord]:
    """Replace text by a resolvable coordinate: ref, line span, content hash, size, why."""
    before = estimate(text)
    key = content_key(text)
    payload = {
        "kind": "ref",
        "ref": ref or f"sha256:{key}",
        "lines": lines or f"1-{text.count(chr(10)) + 1}",
        "sha256": key,
        "tokens": before,
        "why": why or "replaced by reference to save tokens; fetch it if needed",
    }
    out = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return out, OpRecord("ref", before, estimate(out), f"replaced {before} tokens by a reference", payload)


# --------------------------------------------------------------------------- #
# Head/tail truncation

MARKER_RE = re.compile(r"\n?…\[omitted (\d+) tokens; ref=([^;\]]*)[^\]]*\]\n?")


def _marker(omitted: int, ref: str | None) -> str:
    return f"\n…[omitted {omitted} tokens; ref={ref or 'ref:unknown'}; fetch_ref to retrieve]\n"


def _head(text: str, budget: int, estimate: Estimator) -> str:
    """Prefix within budget, ending at a line break unless that loses over half of it."""
    cut = clip(text, budget, estimate)
    if cut != text and (nl := cut.rfind("\n")) >= len(cut) // 2:
        cut = cut[:nl]
    return cut


def _tail(text: str, budget: int, estimate: Estimator) -> str:
    """Suffix within budget, starting after a line break unless that loses over half of it."""
    if budget <= 0 or not text:
        return ""
    lo, hi = 0, len(text)  # smallest start whose suffix fits; text[hi:] == "" fits
    while lo < hi:
        mid = (lo + hi) // 2
        if estimate(text[mid:]) <= budget:
            hi = mid
        else:
            lo = mid + 1
    cut = text[lo:]
    if lo > 0 and (nl := cut.find("\n")) != -1 and nl < len(cut) // 2:
        cut = cut[nl + 1 :]
    return cut


def truncate_head_tail(
    text: str,
    budget: int,
    *,
    ref: str | None = None,
    head_ratio: float = 0.55,
    estimate: Estimator = estimate_tokens,
) -> tuple[str, OpRecord]:
    """Keep the head (identity, key fields) and tail (status, error codes), mark the middle.

    Idempotent: text that already fits is returned unchanged, and a marked text cut again
    gets one marker with the summed omission instead of a second marker.
    """
    before = estimate(text)
    if before <= budget:
        return text, OpRecord("truncate", before, before, "fits")
    stripped = text.strip()
    if stripped[:1] in "{[":
        try:
            value = json.loads(stripped)
        except ValueError:
            value = None
        if isinstance(value, (dict, list)):
            return _truncate_json(value, before, budget, ref, estimate)
    prior, marked = 0, False
    head_src = tail_src = text
    if (m := MARKER_RE.search(text)) is not None:
        prior, marked = int(m.group(1)), True
        ref = ref or m.group(2)
        head_src, tail_src = text[: m.start()], text[m.end() :]
    body = budget - estimate(_marker(before + prior, ref))
    out, omitted = "", before + prior
    while body >= 0:
        hb = int(body * head_ratio)
        head = _head(head_src, hb, estimate).rstrip("\n")
        tail = _tail(tail_src, body - hb, estimate).lstrip("\n")
        if marked:
            omitted = prior + max(0, estimate(head_src) - estimate(head)) + max(0, estimate(tail_src) - estimate(tail))
        else:
            if len(head) + len(tail) > len(text):  # cannot happen for subadditive estimators
                tail = text[len(head) :]
            omitted = max(0, before - estimate(head) - estimate(tail))
        out = head + _marker(omitted, ref) + tail
        over = estimate(out) - budget
        if over <= 0:
            break
        body -= over
        out, omitted = "", before + prior
    detail = f"head {int(head_ratio * 100)}% + tail {100 - int(head_ratio * 100)}% + ref marker"
    return out, OpRecord("truncate", before, estimate(out), detail, {"omitted_tokens": omitted, "ref": ref})


_KEEP_KEY = re.compile(
    r"^(ok|success|error|errors|err|status|status_code|code|exit_code|message|ref|refs|url|uri|href|path|id"
    r"|next|next_cursor|cursor|has_more|partial|truncated|.*_ref|.*_refs|.*_id|.*_url)$",
    re.I,
)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _fit_json(value: Any, budget: int, estimate: Estimator) -> tuple[Any, bool]:
    """Shrink a JSON value to ``budget`` tokens (approximately; the caller verifies).

    Dicts keep status/error/ref-like keys first, then others in order; strings are cut
    head/tail; lists keep leading items and count the rest. Returns (value, fitted); a
    value that cannot shrink to the budget comes back with fitted=False.
    """
    cost = estimate(_json(value))
    if cost <= budget:
        return value, True
    if isinstance(value, str):
        cut, _ = truncate_head_tail(value, budget - 1, estimate=estimate)
        return cut, bool(cut)
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: not _KEEP_KEY.match(str(k)))
        chosen: dict[Any, Any] = {}
        room = budget - 1
        for k in keys:
            whole = estimate(_json({k: value[k]}))
            if whole <= room:
                chosen[k], room = value[k], room - whole
                continue
            key_cost = estimate(_json({k: None}))
            if room - key_cost <= 2:
                continue
            sub, ok = _fit_json(value[k], room - key_cost, estimate)
            if ok:
                chosen[k] = sub
                room -= estimate(_json({k: sub}))
        return {k: chosen[k] for k in value if k in chosen}, True
    if isinstance(value, list):
        items, room = [], budget - 12
        for item in value:
            c = estimate(_json(item)) + 1
            if c > room:
                break
            items.append(item)
            room -= c
        if len(items) < len(value):
            items.append(f"…[omitted {len(value) - len(items)} items]")
        return items, True
    return value, False


_LIST_MARK = re.compile(r"^…\[omitted (\d+) items, (\d+) tokens; ref=([^\]]*)\]$")


def _truncate_json(value: Any, before: int, budget: int, ref: str | None, estimate: Estimator) -> tuple[str, OpRecord]:
    """Field-aware truncation that always yields valid JSON (or nothing)."""
    compact = _json(value)
    if estimate(compact) <= budget:
        after = estimate(compact)
        return compact, OpRecord("truncate", before, after, "re-serialized compactly", {"json": True})
    prior = 0
    if isinstance(value, dict) and isinstance(value.get("_truncated"), dict):  # cut again: one marker, summed
        prior = int(value["_truncated"].get("omitted_tokens", 0) or 0)
        ref = ref or value["_truncated"].get("ref")
        value = {k: v for k, v in value.items() if k != "_truncated"}
    elif isinstance(value, list) and value and isinstance(value[-1], str) and (m := _LIST_MARK.match(value[-1])):
        prior, ref = int(m.group(2)), ref or m.group(3)
        value = value[:-1]
    body = budget
    while body > 0:
        shrunk, _ = _fit_json(value, body, estimate)
        omitted = prior + max(0, before - estimate(_json(shrunk)))
        note = {"omitted_tokens": omitted, "ref": ref or "ref:unknown"}
        if isinstance(shrunk, dict):
            dropped = [str(k) for k in value if k not in shrunk][:10]
            out = _json({**shrunk, "_truncated": {**note, "omitted_keys": dropped}})
        else:  # a list stays a list: the last element says what is missing
            items = [x for x in shrunk if not (isinstance(x, str) and x.startswith("…[omitted "))]
            mark = f"…[omitted {len(value) - len(items)} items, {omitted} tokens; ref={note['ref']}]"
            out = _json([*items, mark])
        over = estimate(out) - budget
        if over <= 0:
            detail = "JSON-aware: kept ok/error/status/ref fields, valid JSON"
            return out, OpRecord("truncate", before, estimate(out), detail, {"json": True, **note})
        body -= max(over, 1 + body // 20)
    return "", OpRecord("truncate", before, 0, "JSON-aware: nothing fits the budget", {"json": True})


# --------------------------------------------------------------------------- #
# Sliding window


def sliding_window(
    turns: Sequence[str],
    *,
    budget: int | None = None,
    max_turns: int | None = None,
    pinned: Sequence[str] = (),
    estimate: Estimator = estimate_tokens,
) -> tuple[str, OpRecord]:
    """Pinned lines verbatim, one line summarizing what rolled out, then the newest turns.

    Pinned lines are always emitted (they are constraints; charge them in the caller's
    floor); the output may exceed ``budget`` only if the pinned lines alone do.
    """
    pin_text = "\n".join(pinned)
    before = estimate("\n".join([*pinned, *turns]))
    room = (budget if budget is not None else 10**12) - estimate(pin_text) - (1 if pinned else 0)
    rolled_count_line = _rolled_line(len(turns), before, [])
    room -= estimate(rolled_count_line) + 1
    if room < 0:  # not even the summary line fits: pinned lines only
        detail = f"only the {len(pinned)} pinned lines fit; rolled out all {len(turns)} turns"
        return pin_text, OpRecord("window", before, estimate(pin_text), detail, {"kept_turns": 0,
                                                                                 "rolled_out": len(turns)})
    kept: list[str] = []
    for turn in reversed(turns):
        if max_turns is not None and len(kept) >= max_turns:
            break
        cost = estimate(turn) + 1
        if cost > room:
            break
        kept.append(turn)
        room -= cost
    kept.reverse()
    rolled = list(turns[: len(turns) - len(kept)])
    parts = list(pinned)
    if rolled:
        rolled_tokens = estimate("\n".join(rolled))
        evidence = sorted((n for n, t in enumerate(rolled) if is_failure_line(t) or score_line(t) >= 5),
                          key=lambda n: (-score_line(rolled[n]), n))
        snippets: list[str] = []
        line = _rolled_line(len(rolled), rolled_tokens, snippets)
        room += estimate(rolled_count_line) - estimate(line)
        for n in evidence[:3]:  # add evidence snippets while the line still fits
            trial = _rolled_line(len(rolled), rolled_tokens, [*snippets, clip(rolled[n], 24, estimate)])
            extra = estimate(trial) - estimate(line)
            if extra <= room:
                room -= extra
                snippets.append(clip(rolled[n], 24, estimate))
                line = trial
        parts.append(line)
    parts.extend(kept)
    out = "\n".join(parts)
    detail = f"kept last {len(kept)} of {len(turns)} turns, {len(pinned)} pinned lines, rolled out {len(rolled)}"
    return out, OpRecord("window", before, estimate(out), detail, {"kept_turns": len(kept), "rolled_out": len(rolled)})


def _rolled_line(count: int, tokens: int, snippets: list[str]) -> str:
    evidence = f"; evidence: {' | '.join(snippets)}" if snippets else ""
    return f"[rolled out {count} earlier turns (~{tokens} tokens){evidence}]"


# --------------------------------------------------------------------------- #
# Tool schema compression


def _tool_parts(tool: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(dict holding name/description, parameter schema) for OpenAI, Anthropic or flat tools."""
    holder = tool["function"] if isinstance(tool.get("function"), dict) else tool
    params = holder.get("parameters", holder.get("input_schema"))
    return holder, params if isinstance(params, dict) else None


def _strip_param_docs(schema: Any) -> None:
    if isinstance(schema, dict):
        for key in ("description", "title", "examples", "default"):
            schema.pop(key, None)
        for sub in schema.values():
            _strip_param_docs(sub)
    elif isinstance(schema, list):
        for sub in schema:
            _strip_param_docs(sub)


def _first_sentence(text: str) -> str:
    m = re.search(r"[.。!！?？](\s|$)", text)
    return text[: m.end()].strip() if m else text


def compress_schema(text: str, budget: int, *, estimate: Estimator = estimate_tokens) -> tuple[str, OpRecord]:
    """Compress a JSON list of tool schemas step by step until it fits (seed 5.3.3).

    Names, required parameters, types and enums survive longest: they are what a valid
    call needs. Non-JSON input falls back to :func:`extract_lines`.
    """
    before = estimate(text)
    if before <= budget:
        return text, OpRecord("schema", before, before, "fits")
    try:
        tools = json.loads(text)
    except ValueError:
        tools = None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return extract_lines(text, budget, estimate=estimate)

    def param_docs(t: dict[str, Any]) -> None:
        _strip_param_docs(_tool_parts(t)[1])

    def short_desc(t: dict[str, Any]) -> None:
        holder = _tool_parts(t)[0]
        if isinstance(holder.get("description"), str):
            holder["description"] = _first_sentence(holder["description"])

    def no_desc(t: dict[str, Any]) -> None:
        _tool_parts(t)[0].pop("description", None)

    def required_only(t: dict[str, Any]) -> None:
        params = _tool_parts(t)[1]
        if params and isinstance(params.get("properties"), dict):
            required = set(params.get("required", []))
            params["properties"] = {k: v for k, v in params["properties"].items() if k in required}

    steps: list[tuple[str, Callable[[dict[str, Any]], None] | None, bool]] = [
        ("compact JSON", None, False),
        ("dropped parameter descriptions", param_docs, False),
        ("shortened tool descriptions", short_desc, False),
        ("rendered as signatures with short descriptions", None, True),
        ("dropped tool descriptions, kept name/parameters/required", no_desc, True),
        ("dropped optional parameters", required_only, True),
    ]
    done: list[str] = []
    render: Callable[[list[dict[str, Any]]], str] = _json
    for label, step, signatures in steps:
        if step is not None:
            for tool in tools:
                step(tool)
        if signatures:
            render = _signatures
        done.append(label)
        out = render(tools)
        if estimate(out) <= budget:
            return out, OpRecord("schema", before, estimate(out), "; ".join(done), {"steps": done})
    dropped: list[str] = []
    while tools and estimate(render(tools)) > budget:
        dropped.insert(0, str(_tool_parts(tools.pop())[0].get("name", "?")))
    out = render(tools) if tools else ""
    done.append(f"dropped tools {', '.join(dropped)}")
    return out, OpRecord("schema", before, estimate(out), "; ".join(done), {"steps": done, "dropped_tools": dropped})


def _signatures(tools: list[dict[str, Any]]) -> str:
    """One line per tool: ``name(req: type, opt?: type, mode: "a"|"b") - description``."""
    lines = []
    for tool in tools:
        holder, params = _tool_parts(tool)
        props = params.get("properties", {}) if params else {}
        required = set(params.get("required", [])) if params else set()
        args = []
        for pname, spec in props.items():
            spec = spec if isinstance(spec, dict) else {}
            kind = "|".join(json.dumps(v, ensure_ascii=False) for v in spec["enum"]) if "enum" in spec else \
                str(spec.get("type", "any"))
            args.append(f"{pname}{'' if pname in required else '?'}: {kind}")
        desc = holder.get("description")
        lines.append(f"{holder.get('name', '?')}({', '.join(args)})" + (f" - {desc}" if desc else ""))
    return "\n".join(lines)
