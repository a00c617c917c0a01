"""Recoverable cuts: reference replacement and head/tail truncation with a ref marker.

Re-exported by ``ctxkit.context.operators``; see its docstring for the API. JSON input is truncated
field-aware and stays valid JSON.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import msgspec

from ctxkit.context.operators.common import OpRecord
from ctxkit.context.operators.dedupe import content_key
from ctxkit.context.tokens import CHARS_PER_TOKEN_LATIN, Estimator, clip, estimate_tokens, is_default_estimator

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
    if text.isascii() and is_default_estimator(estimate):  # what the search would find (as in clip)
        lo = max(0, len(text) - CHARS_PER_TOKEN_LATIN * budget)
    else:
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
    if text.lstrip()[:1] in ("{", "["):
        try:
            value = json.loads(text.strip())
        except ValueError:
            value = None
        if isinstance(value, (dict, list)):
            return _truncate_json(value, before, budget, ref, estimate)
    prior, marked = 0, False
    head_src = tail_src = text
    # Cut before: one marker, with the summed omission (the substring test spares most texts the regex).
    if "…[omitted " in text and (m := MARKER_RE.search(text)) is not None:
        prior, marked = int(m.group(1)), True
        ref = ref or m.group(2)
        head_src, tail_src = text[: m.start()], text[m.end() :]
    body = budget - estimate(_marker(before + prior, ref))
    out, omitted, after = "", before + prior, 0  # after: estimate(out), once out is not empty
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
        after = estimate(out)
        if after <= budget:
            break
        body -= after - budget
        out, omitted = "", before + prior
    detail = _detail(head_ratio)
    return out, OpRecord("truncate", before, after if out else estimate(out), detail,
                         {"omitted_tokens": omitted, "ref": ref})


@functools.lru_cache(maxsize=32)  # one ratio per segment setting, asked for at every cut
def _detail(head_ratio: float) -> str:
    return f"head {int(head_ratio * 100)}% + tail {100 - int(head_ratio * 100)}% + ref marker"


_KEEP_KEY = re.compile(
    r"^(ok|success|error|errors|err|status|status_code|code|exit_code|message|ref|refs|url|uri|href|path|id"
    r"|next|next_cursor|cursor|has_more|partial|truncated|.*_ref|.*_refs|.*_id|.*_url)$",
    re.I,
)


_JSON = msgspec.json.Encoder()


def compact_json(value: Any) -> str:
    """JSON without spaces, non-ASCII kept: what a compressed schema or a cut JSON value costs.

    msgspec's encoder, faster than ``json.dumps`` on a tool schema (docs/performance.md): floats in
    their shortest form (``1e16``), NaN and infinities as ``null`` (JSON has neither). A value it
    cannot encode (a lone surrogate, a key that is not a string or a number) goes through ``json.dumps``."""
    try:
        return _JSON.encode(value).decode()
    except (TypeError, ValueError, msgspec.EncodeError):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _fit_json(value: Any, budget: int, estimate: Estimator) -> tuple[Any, bool]:
    """Shrink a JSON value to ``budget`` tokens (approximately; the caller verifies).

    Dicts keep status/error/ref-like keys first, then others in order; strings are cut
    head/tail; lists keep leading items and count the rest. Returns (value, fitted); a
    value that cannot shrink to the budget comes back with fitted=False.
    """
    cost = estimate(compact_json(value))
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
            whole = estimate(compact_json({k: value[k]}))
            if whole <= room:
                chosen[k], room = value[k], room - whole
                continue
            key_cost = estimate(compact_json({k: None}))
            if room - key_cost <= 2:
                continue
            sub, ok = _fit_json(value[k], room - key_cost, estimate)
            if ok:
                chosen[k] = sub
                room -= estimate(compact_json({k: sub}))
        return {k: chosen[k] for k in value if k in chosen}, True
    if isinstance(value, list):
        items, room = [], budget - 12
        for item in value:
            c = estimate(compact_json(item)) + 1
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
    compact = compact_json(value)
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
        omitted = prior + max(0, before - estimate(compact_json(shrunk)))
        note = {"omitted_tokens": omitted, "ref": ref or "ref:unknown"}
        if isinstance(shrunk, dict):
            dropped = [str(k) for k in value if k not in shrunk][:10]
            out = compact_json({**shrunk, "_truncated": {**note, "omitted_keys": dropped}})
        else:  # a list stays a list: the last element says what is missing
            items = [x for x in shrunk if not (isinstance(x, str) and x.startswith("…[omitted "))]
            mark = f"…[omitted {len(value) - len(items)} items, {omitted} tokens; ref={note['ref']}]"
            out = compact_json([*items, mark])
        over = estimate(out) - budget
        if over <= 0:
            detail = "JSON-aware: kept ok/error/status/ref fields, valid JSON"
            return out, OpRecord("truncate", before, estimate(out), detail, {"json": True, **note})
        body -= max(over, 1 + body // 20)
    return "", OpRecord("truncate", before, 0, "JSON-aware: nothing fits the budget", {"json": True})
