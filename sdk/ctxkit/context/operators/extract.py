"""Lossy operators that keep whole lines: scored extraction, extractive summary, sliding window.

Re-exported by ``ctxkit.context.operators``; see its docstring for the API. ``extract_lines``,
``summarize_lines`` and ``sliding_window`` accept ``scorer=`` (default :func:`score_line`) so
a caller handling many texts in one go (the allocator) can pass a memoised scorer; the
results are identical either way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import msgspec

from ctxkit.context.operators.common import OpRecord
from ctxkit.context.tokens import (
    Estimator,
    clip,
    count_cjk,
    count_cjk_lines,
    estimate_tokens,
    is_default_estimator,
    remember,
    tokens_from_cjk,
)

Scorer = Callable[[str], int]

# The failure hints. Words that only talk about failure ("限流" in "let's discuss rate
# limiting") are not in it: a chat line about a topic must not crowd out a real error fact.
FAIL_HINTS = ("failed", "error", "timeout", "429", "e_", "denied", "拒绝", "失败")
CONSTRAINT_HINTS = ("不", "禁止", "不得", "必须", "只能", "仅", "超过", "至少", "至多")
_CONSTRAINT_WORDS = re.compile(
    r"\b(must|never|only|not|no|don't|do not|cannot|can't|forbidden|required|at least|at most|without)\b", re.I
)
UNIT_HINTS = ("分", "秒", "％", "%", "token", "mib", "ms", "小时", "分钟", "元")
_URI = re.compile(r"[a-z][a-z0-9+.-]*://\S", re.I)
_UNIT_WORDS = re.compile(r"\d\s*(s|sec|secs|seconds|min|minutes|h|hours|kb|mb|gb|usd|cents?)\b", re.I)

# Single-pass forms of the checks above, for speed; score_line gives the same scores.
# On an ASCII line, re.I is plain ASCII case folding, so the case-sensitive patterns on the
# lowercased line match exactly when the re.I ones match the line (re.I is several times
# slower in re). Non-ASCII lines keep the re.I patterns: there "ſ" matches "s" and the
# Kelvin sign "k", which lower() does not reproduce.
_ASCII_DIGIT = re.compile(r"[0-9]")
_CONSTRAINT_WORDS_LOW = re.compile(_CONSTRAINT_WORDS.pattern)
_UNIT_WORDS_LOW = re.compile(_UNIT_WORDS.pattern)
_URI_LOW = re.compile(_URI.pattern)
_CONSTRAINT_HINT = re.compile("|".join(map(re.escape, CONSTRAINT_HINTS)))
_UNIT_HINT = re.compile("|".join(map(re.escape, UNIT_HINTS)))
_FAIL_HINT = re.compile("|".join(map(re.escape, FAIL_HINTS)))


def score_line(line: str) -> int:
    """A line's evidence score: figures, constraints, units, refs, failures, key=value; Chinese and English.

    Not precise; its value is that every kept line can say why it was kept.
    """
    score = 0
    ascii_only = line.isascii()
    low = line.lower()
    # str.isdigit, not \d: it also counts digits such as "²"; ASCII digits answer most lines fast.
    digit = _ASCII_DIGIT.search(line) is not None or (not ascii_only and any(map(str.isdigit, line)))
    if digit:
        score += 5  # figures, limits, amounts
    if ascii_only:  # the CJK hints cannot occur in an ASCII line
        constraint = _CONSTRAINT_WORDS_LOW.search(low) is not None
    else:
        constraint = _CONSTRAINT_HINT.search(line) is not None or _CONSTRAINT_WORDS.search(line) is not None
    if constraint:
        score += 4  # negations and constraints
    # _UNIT_WORDS needs a \d, which str.isdigit also accepts, so no digit means no match.
    if _UNIT_HINT.search(low):
        score += 3  # units
    elif digit and (_UNIT_WORDS_LOW.search(low) if ascii_only else _UNIT_WORDS.search(line)):
        score += 3
    if "/" in line:
        score += 2  # a ref that can be fetched again
        if "://" in line and (_URI_LOW.search(low) if ascii_only else _URI.search(line)):
            score += 2  # a resolvable URI is worth more than a bare slash ("a / b")
    if _FAIL_HINT.search(low):
        score += 3  # failure reasons
    if "=" in line:
        score += 2  # key=value is more stable than prose
    return score


def is_failure_line(line: str) -> bool:
    return _FAIL_HINT.search(line.lower()) is not None


class LinePlan(msgspec.Struct, frozen=True, gc=False):
    """What :func:`extract_lines` / :func:`summarize_lines` settle before looking at the budget.

    The lines in the order they are taken (best first, blank lines never) with what each
    costs. It depends on the text, the pinned lines, ``keep_recent`` and the estimator, not on
    the budget, so :func:`cut_lines` can cut it again at another budget (the allocator keeps
    plans across calls). Make one with :func:`plan_extract` or :func:`plan_summary`. A frozen
    struct: immutable (plans are shared), quick to make, not tracked by the cyclic collector.
    """

    op: str  # "extract" or "summarize"
    before: int  # estimate of the whole text
    lines: tuple[str, ...]
    order: tuple[int, ...]  # line indices, in the order they are taken
    costs: tuple[int, ...]  # estimate(lines[n] + "\n") for n in order
    older: int = 0  # summarize: turns before the recent ones
    recent: frozenset[int] = frozenset()  # summarize: the keep_recent newest lines
    failure: frozenset[int] = frozenset()  # summarize: older lines with failure evidence
    cjk: tuple[int, ...] | None = None  # count_cjk of each line, when made with the default estimator


_NONE: frozenset[int] = frozenset()


def plan_extract(
    text: str,
    *,
    pinned: Sequence[str] = (),
    estimate: Estimator = estimate_tokens,
    scorer: Scorer = score_line,
    line_cjk: dict[str, int] | None = None,
) -> LinePlan:
    """Rank for :func:`extract_lines`: pinned lines first, then by score, then in text order.

    ``line_cjk`` (line -> ``count_cjk(line)``), for the default estimator: a memo shared by many
    plans (the allocator's, for one call), filled as it goes; lines repeat across texts (a chunk
    retrieved twice, the same log line in two tool results). The plan is the same without it."""
    return _plan_extract(text, pinned, estimate, scorer, estimate(text), line_cjk)


def _plan_extract(
    text: str, pinned: Sequence[str], estimate: Estimator, scorer: Scorer, before: int,
    line_cjk: dict[str, int] | None = None,
) -> LinePlan:
    lines = text.split("\n")
    scores = [-scorer(line) for line in lines]
    if pinned:
        pins = set(pinned)
        order = sorted(range(len(lines)), key=lambda n: (lines[n] not in pins, scores[n], n))
    else:  # a stable sort by score alone keeps text order among equals
        order = sorted(range(len(lines)), key=scores.__getitem__)
    order = [n for n in order if lines[n] and not lines[n].isspace()]  # lines[n].strip(), without the copy
    costs, cjk = _costs(text, lines, order, estimate, line_cjk)
    return LinePlan("extract", before, tuple(lines), tuple(order), costs, 0, _NONE, _NONE, cjk)


def _costs(
    text: str, lines: list[str], order: list[int], estimate: Estimator, line_cjk: dict[str, int] | None = None
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """``estimate(line + "\\n")`` for the lines in ``order``; with the default estimator also every
    line's CJK count, from which all those estimates (and those of joins) follow by arithmetic."""
    if not is_default_estimator(estimate):
        return tuple(estimate(lines[n] + "\n") for n in order), None
    if line_cjk is None or text.isascii():
        cjk = count_cjk_lines(text, lines)
    else:
        get = line_cjk.get
        known = [get(line, -1) for line in lines]
        if -1 in known:  # one scan of the text for all its lines, then remembered
            cjk = count_cjk_lines(text, lines)
            line_cjk.update(zip(lines, cjk, strict=True))
        else:
            cjk = tuple(known)
    return tuple([tokens_from_cjk(len(lines[n]) + 1, cjk[n]) for n in order]), cjk


def plan_summary(
    text: str,
    *,
    keep_recent: int = 3,
    pinned: Sequence[str] = (),
    estimate: Estimator = estimate_tokens,
    scorer: Scorer = score_line,
    line_cjk: dict[str, int] | None = None,
) -> LinePlan:
    """Rank for :func:`summarize_lines`: pinned lines, failure evidence from older lines, the
    ``keep_recent`` newest lines (newest first), then other older lines by score. ``line_cjk``:
    as for :func:`plan_extract`."""
    return _plan_summary(text, keep_recent, pinned, estimate, scorer, estimate(text), line_cjk)


def _plan_summary(
    text: str, keep_recent: int, pinned: Sequence[str], estimate: Estimator, scorer: Scorer, before: int,
    line_cjk: dict[str, int] | None = None,
) -> LinePlan:
    lines = text.split("\n")
    live = [n for n, line in enumerate(lines) if line.strip()]
    recent = live[-keep_recent:] if keep_recent > 0 else []
    recent_set = frozenset(recent)
    pins = set(pinned)
    failure = frozenset(n for n in live if n not in recent_set and is_failure_line(lines[n]))

    def rank(n: int) -> tuple[int, int, int]:
        if lines[n] in pins:
            return (0, 0, n)
        if n in failure:
            return (1, 0, n)
        if n in recent_set:
            return (2, 0, -n)
        return (3, -scorer(lines[n]), n)

    order = sorted(live, key=rank) if len(live) > 1 else live
    costs, cjk = _costs(text, lines, order, estimate, line_cjk)
    return LinePlan("summarize", before, tuple(lines), tuple(order), costs, len(live) - len(recent), recent_set,
                      failure, cjk)


def cut_lines(
    plan: LinePlan, budget: int, *, ref: str | None = None, estimate: Estimator = estimate_tokens
) -> tuple[str, OpRecord]:
    """Take the plan's lines in order while they fit; emit them in text order with one marker.

    Per-line costs (line + newline) bound the joined text for subadditive estimators; the
    assembled text is checked anyway and trimmed from the lowest-ranked line. When no line
    fits, the marker alone is returned only with a ``ref`` (it carries a coordinate worth
    having). ``estimate`` must be the one the plan was made with.
    """
    lines, total, op = plan.lines, plan.before, plan.op
    if total <= budget:
        return "\n".join(lines), OpRecord(op, total, total, "fits")
    cjk = plan.cjk
    if cjk is not None and ref is None and (not plan.costs or min(plan.costs) >= budget):
        # Default estimator: a marker costs >= 0, so no line fits the room left beside it, and
        # without a ref there is no marker alone to give: nothing (the loop below would agree).
        return "", _lines_record(plan, [], total, estimate(""))
    shown_ref = ref or "ref:unknown"
    n_lines, older = len(lines), plan.older
    if cjk is None:
        room = budget - estimate(_marker(op, n_lines, older, n_lines, total, shown_ref)) - 1
    else:  # the default estimator: CJK counts add up, and the marker templates hold none
        ref_cjk = 0 if shown_ref.isascii() else count_cjk(shown_ref)
        first = _marker(op, n_lines, older, n_lines, total, shown_ref)
        room = budget - tokens_from_cjk(len(first), ref_cjk) - 1
    kept: list[int] = []
    for n, cost in zip(plan.order, plan.costs, strict=True):
        if cost <= room:
            kept.append(n)
            room -= cost
    out, chosen, omitted, after = "", [], total, 0
    while kept or ref is not None:
        chosen = sorted(kept)
        body = [lines[n] for n in chosen]
        omitted = 0
        chosen_cjk = sum(map(cjk.__getitem__, chosen)) if cjk is not None else 0
        if len(chosen) < n_lines:
            if cjk is None:
                shown = estimate("\n".join(body))
            elif body:  # the join of the chosen lines, counted without building it
                shown = tokens_from_cjk(sum(map(len, body)) + len(body) - 1, chosen_cjk)
            else:
                shown = 0
            omitted = total - shown if total > shown else 0
        if omitted:
            if op == "summarize":
                body.insert(0, _marker(op, n_lines, older, len(chosen), omitted, shown_ref))
            else:
                body.append(_marker(op, n_lines, older, len(chosen), omitted, shown_ref))
        out = "\n".join(body)
        if cjk is None:
            after = estimate(out)
        else:
            after = tokens_from_cjk(len(out), chosen_cjk + (ref_cjk if omitted else 0))
            remember(estimate, out, after)  # asked for again by the allocator
        if after <= budget:
            break
        if not kept:  # not even the marker alone fits
            out, chosen, omitted, after = "", [], total, 0
            break
        kept.pop()  # the lowest-ranked line taken
    else:  # no line fits and no ref for a marker alone: nothing at all
        out, chosen, omitted, after = "", [], total, 0
    return out, _lines_record(plan, chosen, omitted, after if out else estimate(out))


def _marker(op: str, n_lines: int, older: int, kept: int, omitted: int, ref: str) -> str:
    """The marker :func:`cut_lines` puts with the kept lines (``older``: the plan's earlier turns)."""
    if op == "extract":
        return f"…[extracted {kept}/{n_lines} lines; omitted {omitted} tokens; ref={ref}]"
    return f"[summary: {older} earlier turns condensed, failure evidence kept; omitted {omitted} tokens; ref={ref}]"


def _lines_record(plan: LinePlan, chosen: list[int], omitted: int, after: int) -> OpRecord:
    if plan.op == "extract":
        detail = f"kept {len(chosen)}/{len(plan.lines)} lines by score (numbers, negations, units, refs, failures)"
    else:
        n_recent = len(plan.recent.intersection(chosen))
        n_fail = sum(1 for n in chosen if n in plan.failure)
        detail = f"kept {n_fail} failure-evidence lines and the last {n_recent} turns"
    return OpRecord(plan.op, plan.before, after, detail, {"kept_lines": [n + 1 for n in chosen],
                                                           "omitted_tokens": omitted})


def extract_lines(
    text: str,
    budget: int,
    *,
    ref: str | None = None,
    pinned: Sequence[str] = (),
    estimate: Estimator = estimate_tokens,
    scorer: Scorer = score_line,
) -> tuple[str, OpRecord]:
    """Keep the best-scoring lines (pinned lines first) in their original order."""
    before = estimate(text)
    if before <= budget:
        return text, OpRecord("extract", before, before, "fits")
    return cut_lines(_plan_extract(text, pinned, estimate, scorer, before), budget, ref=ref, estimate=estimate)


def summarize_lines(
    text: str,
    budget: int,
    *,
    keep_recent: int = 3,
    ref: str | None = None,
    pinned: Sequence[str] = (),
    estimate: Estimator = estimate_tokens,
    scorer: Scorer = score_line,
) -> tuple[str, OpRecord]:
    """Deterministic extractive summary of a line-per-turn history.

    Rank: see :func:`plan_summary`. Generative summaries may flip a negation or drop a unit
   , so this one only ever copies lines.
    """
    before = estimate(text)
    if before <= budget:
        return text, OpRecord("summarize", before, before, "fits")
    plan = _plan_summary(text, keep_recent, pinned, estimate, scorer, before)
    return cut_lines(plan, budget, ref=ref, estimate=estimate)


# --------------------------------------------------------------------------- #
# Sliding window


def sliding_window(
    turns: Sequence[str],
    *,
    budget: int | None = None,
    max_turns: int | None = None,
    pinned: Sequence[str] = (),
    estimate: Estimator = estimate_tokens,
    scorer: Scorer = score_line,
) -> tuple[str, OpRecord]:
    """Pinned lines verbatim, one line summarizing what rolled out, then the newest turns.

    Pinned lines are always emitted (they are constraints; charge them in the caller's
    floor); the output may exceed ``budget`` only if the pinned lines alone do. The summary
    line's own budget is reserved before the newest turns are taken (what rolls out keeps its
    failure reasons and numbers), so newest turns that would fill the
    whole budget cannot reduce the failure evidence of older turns to a bare count.
    """
    pin_text = "\n".join(pinned)
    before = estimate("\n".join([*pinned, *turns]))
    room = (budget if budget is not None else 10**12) - estimate(pin_text) - (1 if pinned else 0)
    scores = [scorer(t) for t in turns]
    failures = [is_failure_line(t) for t in turns]
    # Evidence first: failure lines (FAIL_HINTS), then the best-scored lines, older first on ties.
    ranked = sorted((n for n in range(len(turns)) if failures[n] or scores[n] >= 5),
                    key=lambda n: (not failures[n], -scores[n], n))
    rolled_count_line = _rolled_line(len(turns), before, [])
    # Reserve the summary line with the evidence of every turn but the newest (which is kept
    # whenever anything is): as many snippets as the room allows, failure evidence first.
    reserve_line, reserve_snips = rolled_count_line, list[str]()
    for n in [n for n in ranked if n < len(turns) - 1][:_MAX_SNIPPETS]:
        trial = _rolled_line(len(turns), before, [*reserve_snips, clip(turns[n], 24, estimate)])
        if estimate(trial) + 1 > room:
            break
        reserve_line = trial
        reserve_snips.append(clip(turns[n], 24, estimate))
    if estimate(rolled_count_line) + 1 > room:  # not even the summary line fits: pinned lines only
        detail = f"only the {len(pinned)} pinned lines fit; rolled out all {len(turns)} turns"
        return pin_text, OpRecord("window", before, estimate(pin_text), detail, {"kept_turns": 0,
                                                                                 "rolled_out": len(turns)})
    reserved = estimate(reserve_line) + 1
    room -= reserved
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
        room += reserved  # the summary's reserve, plus whatever the kept turns left
        rolled_tokens = estimate("\n".join(rolled))
        snippets: list[str] = []
        line = _rolled_line(len(rolled), rolled_tokens, snippets)
        room -= estimate(line) + 1
        for n in [n for n in ranked if n < len(rolled)][:_MAX_SNIPPETS]:  # while the line still fits
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


_MAX_SNIPPETS = 3


def _rolled_line(count: int, tokens: int, snippets: list[str]) -> str:
    evidence = f"; evidence: {' | '.join(snippets)}" if snippets else ""
    return f"[rolled out {count} earlier turns (~{tokens} tokens){evidence}]"
