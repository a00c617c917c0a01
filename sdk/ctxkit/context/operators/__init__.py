"""Context operators, safest first: dedupe, ref, extract, summarize, truncate, window.

API notes
---------
Every operator is deterministic, takes an ``estimate`` (default :func:`ctxkit.context.tokens.estimate_tokens`)
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
- ``score_line(line) -> int``: the extraction score (numbers, negations/constraints,
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

Budget-independent halves, for callers that cut the same text at many budgets (the allocator
keeps them across calls): ``plan_extract(text, *, pinned, estimate, scorer, line_cjk=None)`` and
``plan_summary(text, *, keep_recent, pinned, estimate, scorer, line_cjk=None) -> LinePlan`` (``line_cjk``:
a dict shared by many plans, line -> CJK count, filled as they go; the plans are the same) then
``cut_lines(plan, budget, *, ref, estimate)``; ``plan_schema(text, *, estimate, least_budget=0) -> SchemaPlan``
then ``cut_schema(plan, text, budget, *, estimate)``; ``line_repeats(text) -> (text, removed)``
with ``dedupe_record(text, out, removed, estimate)``. Each cut equals the one-shot operator.
extract/summarize/window take ``scorer=`` (default ``score_line``; ``memo(score_line)`` scores
each distinct line once).

This module only re-exports: the code lives in ``ops_common`` (OpRecord, SAFE_ORDER, memo),
``ops_dedupe`` (exact and near dedupe), ``ops_extract`` (score, extract, summarize, window),
``ops_truncate`` (ref, head/tail and JSON truncation) and ``ops_schema`` (tool schemas).
"""

from __future__ import annotations

from ctxkit.context.operators.common import SAFE_ORDER, OpRecord, memo
from ctxkit.context.operators.dedupe import (
    Merged,
    content_key,
    dedupe_items,
    dedupe_lines,
    dedupe_record,
    jaccard_5gram,
    line_repeats,
    merge_near_duplicate_lines,
    merge_near_duplicates,
    near_duplicate_pairs,
    normalize,
    shingles,
)
from ctxkit.context.operators.extract import (
    CONSTRAINT_HINTS,
    FAIL_HINTS,
    UNIT_HINTS,
    LinePlan,
    Scorer,
    cut_lines,
    extract_lines,
    is_failure_line,
    plan_extract,
    plan_summary,
    score_line,
    sliding_window,
    summarize_lines,
)
from ctxkit.context.operators.schema import SchemaPlan, compress_schema, cut_schema, plan_schema
from ctxkit.context.operators.truncate import MARKER_RE, ref_replace, truncate_head_tail

__all__ = [
    "CONSTRAINT_HINTS",
    "FAIL_HINTS",
    "MARKER_RE",
    "SAFE_ORDER",
    "UNIT_HINTS",
    "LinePlan",
    "Merged",
    "OpRecord",
    "SchemaPlan",
    "Scorer",
    "compress_schema",
    "content_key",
    "cut_lines",
    "cut_schema",
    "dedupe_items",
    "dedupe_lines",
    "dedupe_record",
    "extract_lines",
    "is_failure_line",
    "jaccard_5gram",
    "line_repeats",
    "memo",
    "merge_near_duplicate_lines",
    "merge_near_duplicates",
    "near_duplicate_pairs",
    "normalize",
    "plan_extract",
    "plan_schema",
    "plan_summary",
    "ref_replace",
    "score_line",
    "shingles",
    "sliding_window",
    "summarize_lines",
    "truncate_head_tail",
]
