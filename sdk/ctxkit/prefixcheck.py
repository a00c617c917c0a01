"""Prefix stability: which prefix segment and line changed between two calls or two runs.

Prompt caching matches the prompt from its first token; at the first difference the rest of the
cache is lost (docs/analysis.md, "Why did our cache hit rate drop?"). This module compares the
cacheable prefix of two calls segment by segment and line by line, and two recorded runs step by
step, so a CI job can stop a release that breaks the cache:

- :func:`prefix_segments` -- the cacheable prefix of whatever an agent produced: a
  ``ContextBuilder`` result, a ``Layout``, a ``Manifest`` (or its JSON, or a ctxview call's JSON),
  a ``Prefix``, Anthropic or OpenAI request parameters. Request parameters are mapped to segments
  exactly as ``ctxkit.instrument`` records them.
- :func:`compare_prefixes` -- the first changed segment, its first changed line and a unified diff.
- :func:`check_runs` -- two runs (manifests or ctxview call JSON), step by step, with the extra
  cost per 1,000 calls at the model's prices (``ctxkit.figures.cost_units``).

``ctxkit.testing`` (the pytest helper) and ``ctxkit check-prefix`` (the command) are built on it.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from ctxkit.figures import COST_WEIGHTS, cache_saving
from ctxkit.manifest import Manifest, Prefix, PrefixSegment, Usage

__all__ = [
    "DEFAULT_PRICES", "CallPrefix", "PrefixChange", "RunsCheck", "check_runs", "compare_prefixes", "dumps",
    "extra_cost", "fetch_run", "prefix_segments", "read_manifests_file", "run_prefixes",
]

# The price book's default row, per 1k tokens in relative units (docs/analysis.md, "Prices and
# model facts"): ctxkit.figures.COST_WEIGHTS per token, quoted per 1k as the server's table holds them.
DEFAULT_PRICES: dict[str, float] = {f"{kind}_per_1k": weight for kind, weight in COST_WEIGHTS.items()}
DIFF_CONTEXT = 2  # unchanged lines shown around a change in the unified diff
MAX_DIFF_LINES = 40


# --------------------------------------------------------------------------- #
# The cacheable prefix of what an agent sends


def _decode_segments(raw: Any) -> list[PrefixSegment]:
    return [msgspec.convert(s, PrefixSegment) for s in raw or [] if isinstance(s, dict)]


def _request_segments(params: Mapping[str, Any], provider: str) -> list[PrefixSegment]:
    """Request parameters to prefix segments, through the same mapping ``ctxkit.instrument`` uses."""
    from ctxkit.providers import request_parts
    from ctxkit.record.call_items import call_manifest

    parts, segments = request_parts(provider, dict(params))
    manifest = call_manifest(
        call_id="prefix-check", run_id="prefix-check", step=0, model=str(params.get("model") or "unknown"),
        provider=provider, agent="default", started_at=datetime(2000, 1, 1, tzinfo=UTC), ended_at=None,
        parts=parts, segments=segments, window=1,
    )
    return list(manifest.prefix.segments) if manifest.prefix else []


def _request_provider(params: Mapping[str, Any]) -> str:
    """The provider whose shapes the parameters use (ctxkit.providers.guess_provider)."""
    from ctxkit.providers import guess_provider

    return guess_provider(dict(params))


def prefix_segments(result: Any, *, provider: str | None = None) -> list[PrefixSegment]:
    """The cacheable prefix of ``result``, segment by segment (name, hash, tokens, line hashes
    and, where known, the text).

    ``result`` is a ``ContextBuilder`` result (``BuiltContext``), a ``Layout``, a ``Manifest`` or its
    JSON (a dict), a ctxview call's JSON (``prefix_segments``), a ``Prefix``, a list of
    ``PrefixSegment``, Anthropic Messages or OpenAI Chat / Responses request parameters (a dict;
    ``provider`` says which when the shape does not), a list of OpenAI chat messages, or a string
    (a system prompt: one segment, ``system``)."""
    from ctxkit.context.layout import Layout

    if isinstance(result, Manifest):
        return list(result.prefix.segments) if result.prefix else []
    if isinstance(result, Prefix):
        return list(result.segments)
    if isinstance(result, Layout):
        return list(result.to_prefix(include_text=True).segments)
    layout = getattr(result, "layout", None)
    if isinstance(layout, Layout):  # a ContextBuilder result
        return list(layout.to_prefix(include_text=True).segments)
    if isinstance(result, str):
        return _request_segments({"system": result}, "anthropic")[:1]
    if isinstance(result, Mapping):
        if isinstance(result.get("schema"), str) and result["schema"].startswith("ctxview.manifest"):
            return _decode_segments((result.get("prefix") or {}).get("segments"))
        if "prefix_segments" in result:
            return _decode_segments(result.get("prefix_segments"))
        return _request_segments(result, provider or _request_provider(result))
    if isinstance(result, Sequence) and all(isinstance(s, PrefixSegment) for s in result):
        return list(result)
    if isinstance(result, Sequence) and all(isinstance(m, Mapping) for m in result):
        return _request_segments({"messages": list(result)}, provider or "openai")
    raise TypeError(
        f"cannot read a prompt prefix from {type(result).__name__}: expected a ContextBuilder result, a Layout, "
        "a Manifest, its prefix, or Anthropic / OpenAI request parameters"
    )


# --------------------------------------------------------------------------- #
# Comparing two prefixes


@dataclass
class PrefixChange:
    """Where two prefixes first differ. ``line`` is 1-based in the newer segment (in the older one
    for a removed line), None when the segments carry no line hashes. ``tokens_lost`` is what the
    cache no longer covers: the newer prefix from this segment to its end."""

    segment: str
    change: str  # "changed", "reordered" (its lines), or the segment "added", "removed", "moved"
    line: int | None = None
    before: str | None = None  # the line's text, when recorded
    after: str | None = None
    diff: str = ""  # a unified diff of the segment, when both texts are known
    tokens_lost: int = 0
    changed_lines: int = 0

    def describe(self) -> str:
        if self.change in ("added", "removed", "moved"):
            return f"segment {self.segment!r} was {self.change}"
        where = f"segment {self.segment!r}" + (f", line {self.line}" if self.line is not None else "")
        if self.change == "reordered":
            now = f": {self.after!r} moved here" if self.after is not None else ""
            return f"{where}: the same lines in another order{now}"
        if self.before is not None and self.after is not None:
            return f"{where}: {self.before!r} -> {self.after!r}"
        if self.after is not None:
            return f"{where}: added {self.after!r}"
        if self.before is not None:
            return f"{where}: removed {self.before!r}"
        return f"{where} changed" + ("" if self.line is not None else " (no line hashes recorded)")


def _lines(segment: PrefixSegment) -> tuple[list[str] | None, list[str] | None]:
    """Line hashes and, when the text was recorded and numbers the same lines, the lines."""
    if segment.lines is None:
        return None, None
    texts = segment.text.split("\n") if segment.text is not None else None
    if texts is not None and len(texts) != len(segment.lines):
        texts = texts[: len(segment.lines)] if len(texts) > len(segment.lines) else None
    return list(segment.lines), texts


def _first_line_change(old: PrefixSegment, new: PrefixSegment) -> PrefixChange:
    change = PrefixChange(segment=new.name, change="changed")
    old_hashes, old_text = _lines(old)
    new_hashes, new_text = _lines(new)
    if old_hashes is None or new_hashes is None:
        return change
    matcher = difflib.SequenceMatcher(None, old_hashes, new_hashes, autojunk=False)
    edits = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    change.changed_lines = sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in edits)
    if edits and sorted(old_hashes) == sorted(new_hashes):
        change.change = "reordered"  # the same lines in another order (a tool list sorted differently)
    if edits:
        op, i1, i2, j1, j2 = edits[0]
        change.line = j1 + 1 if op != "delete" else i1 + 1
        if op != "insert" and old_text is not None:
            change.before = old_text[i1]
        if op != "delete" and new_text is not None:
            change.after = new_text[j1]
    if old.text is not None and new.text is not None:
        diff = difflib.unified_diff(old.text.split("\n"), new.text.split("\n"), f"before/{old.name}",
                                    f"after/{new.name}", n=DIFF_CONTEXT, lineterm="")
        lines = list(diff)
        if len(lines) > MAX_DIFF_LINES:
            lines = lines[:MAX_DIFF_LINES] + [f"... {len(lines) - MAX_DIFF_LINES} more diff lines"]
        change.diff = "\n".join(lines)
    return change


def _grew(old: PrefixSegment, new: PrefixSegment) -> bool:
    """``new`` holds ``old``'s lines and more after them (a conversation that gained turns)."""
    return old.lines is not None and new.lines is not None and new.lines[: len(old.lines)] == old.lines


def compare_prefixes(before: Sequence[PrefixSegment], after: Sequence[PrefixSegment], *,
                     allow_growth: bool = False) -> PrefixChange | None:
    """The first difference between two prefixes, in cache order, or None when they are equal.

    With ``allow_growth`` a prefix that only grew at its end (its last segment gained lines, or
    segments were added after it) counts as equal, as the provider still reads what ``before``
    wrote (docs/analysis.md, "A grown prefix is not a changed one")."""
    names_before = [s.name for s in before]
    for index, new in enumerate(after):
        lost = sum(s.tokens for s in after[index:])
        if index >= len(before):
            if allow_growth:
                return None
            return PrefixChange(segment=new.name, change="added", tokens_lost=lost)
        old = before[index]
        if old.name != new.name:
            kind = "moved" if new.name in names_before else "added"
            return PrefixChange(segment=new.name, change=kind, tokens_lost=lost)
        if old.hash == new.hash:
            continue
        if allow_growth and index == len(before) - 1 and _grew(old, new):
            return None
        change = _first_line_change(old, new)
        change.tokens_lost = lost
        return change
    if len(before) > len(after):
        return PrefixChange(segment=before[len(after)].name, change="removed")
    return None


# --------------------------------------------------------------------------- #
# Cost of a broken prefix


def _weights(prices: Mapping[str, float]) -> dict[str, float]:
    """Per-token weights for ``cost_units`` from a price row per 1k tokens, as the server's
    ``Price.weights`` derives them."""
    return {kind: float(prices.get(f"{kind}_per_1k", DEFAULT_PRICES[f"{kind}_per_1k"])) / 1000.0
            for kind in COST_WEIGHTS}


def extra_cost(tokens: int, prices: Mapping[str, float] = DEFAULT_PRICES, *, provider: str = "anthropic") -> float:
    """What one call pays more when ``tokens`` of its prefix miss the cache instead of being read
    from it, in the price book's units: ``ctxkit.figures.cache_saving`` of the miss at ``prices``
    per 1k tokens. A miss is a cache write with Anthropic; OpenAI reports no writes, so there it is
    uncached input."""
    written = 0 if provider.startswith("openai") else tokens
    miss = Usage(input_tokens=tokens, cache_write_tokens=written)
    return cache_saving(miss, tokens, _weights(prices))


# --------------------------------------------------------------------------- #
# Two runs


@dataclass
class CallPrefix:
    """One recorded call's prefix, as read from a manifest or a ctxview call."""

    call_id: str
    step: int
    model: str
    provider: str
    segments: list[PrefixSegment]
    prices: dict[str, float] | None = None  # the model's price row per 1k, when the server sent it


def _call_prefix(record: Mapping[str, Any]) -> CallPrefix:
    prices = record.get("prices")
    return CallPrefix(
        call_id=str(record.get("call_id") or ""), step=int(record.get("step") or 0),
        model=str(record.get("model") or ""), provider=str(record.get("provider") or ""),
        # A manifest, or a ctxview call's JSON; any other record (a call summary) has no prefix.
        segments=prefix_segments(record) if "schema" in record or "prefix_segments" in record else [],
        prices={k: float(v) for k, v in prices.items()} if isinstance(prices, Mapping) else None,
    )


def run_prefixes(records: Iterable[Mapping[str, Any]], run_id: str | None = None) -> list[CallPrefix]:
    """The calls of one run (manifest JSON or ctxview call JSON), by step, then in the order given."""
    calls = [_call_prefix(r) for r in records if run_id is None or r.get("run_id") == run_id]
    return sorted(calls, key=lambda c: c.step)


def read_manifests_file(path: str) -> list[dict[str, Any]]:
    """Manifests from a file: JSON lines (a client's spool, an export), a JSON list, a batch body
    (``{"manifests": [...]}``), or ctxview call JSON (``/api/v1/calls/<id>``) in any of these."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        whole = msgspec.json.decode(data)
    except msgspec.DecodeError:
        whole = None
    if isinstance(whole, dict):
        whole = whole.get("manifests") or whole.get("results") or [whole]
    if isinstance(whole, list):
        return [m for m in whole if isinstance(m, dict)]
    out = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = msgspec.json.decode(line)
        except msgspec.DecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
        if isinstance(record, dict):
            out.append(record)
    return out


def _change_rate(calls: Sequence[CallPrefix]) -> float:
    """Share of consecutive calls of a run whose prefix changed (other than by growing)."""
    if len(calls) < 2:
        return 0.0
    changed = sum(compare_prefixes(a.segments, b.segments, allow_growth=True) is not None
                  for a, b in zip(calls, calls[1:], strict=False))
    return changed / (len(calls) - 1)


@dataclass
class StepChange:
    step: int
    before_call: str
    after_call: str
    change: PrefixChange


@dataclass
class RunsCheck:
    """Two runs compared step by step. ``changed`` when any step's prefix differs."""

    before_calls: int
    after_calls: int
    compared_steps: int
    changes: list[StepChange] = field(default_factory=list)
    before_change_rate: float = 0.0  # share of consecutive calls whose prefix changed within the run
    after_change_rate: float = 0.0
    model: str = ""
    provider: str = ""
    prices: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    prices_source: str = "the price book's default row"
    extra_cost_per_call: float = 0.0
    extra_cost_per_1000_calls: float = 0.0
    missing_prefix: bool = False  # a run recorded no prefix at all

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    @property
    def first(self) -> StepChange | None:
        return self.changes[0] if self.changes else None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["changed"] = self.changed
        return out

    def report(self) -> str:
        """Readable in a CI log: the verdict, the segment and line, the diff, the cost."""
        head = (f"compared {self.compared_steps} steps ({self.before_calls} calls before, "
                f"{self.after_calls} after)")
        if self.missing_prefix:
            return f"{head}\nno prefix recorded in one of the runs: nothing to compare"
        if not self.changed:
            return f"{head}\nprefix unchanged"
        first = self.changes[0]
        lines = [head, f"PREFIX CHANGED at step {first.step} ({first.before_call} -> {first.after_call}): "
                       f"{first.change.describe()}"]
        if len(self.changes) > 1:
            lines.append(f"{len(self.changes)} of {self.compared_steps} steps differ")
        if first.change.diff:
            lines.append(first.change.diff)
        every = "changes from call to call" if self.after_change_rate > self.before_change_rate else "changed once"
        lines.append(f"the new prefix {every} within the run ({self.after_change_rate:.0%} of consecutive calls, "
                     f"{self.before_change_rate:.0%} before)")
        price = ", ".join(f"{k.removesuffix('_per_1k').replace('_', ' ')} {v:g}"
                          for k, v in self.prices.items() if k != "output_per_1k")
        lines.append(f"cache lost from segment {first.change.segment!r} on: {first.change.tokens_lost} tokens a call")
        lines.append(f"estimated extra cost: {self.extra_cost_per_1000_calls:,.2f} per 1,000 calls "
                     f"({self.extra_cost_per_call:,.4f} a call; {self.model or 'model'} at {price} per 1k tokens, "
                     f"{self.prices_source})")
        return "\n".join(lines)


def check_runs(before: Sequence[CallPrefix], after: Sequence[CallPrefix], *,
               prices: Mapping[str, float] | None = None) -> RunsCheck:
    """Compare two runs of one agent step by step (the first call of each step).

    The extra cost per 1,000 calls: each call whose prefix now misses pays :func:`extra_cost` of
    the tokens from the changed segment to the end of the prefix. When the new prefix changes from
    call to call within the run (a timestamp, an id), that is the share of calls by which its rate
    of change exceeds the old run's; when it changed once, one call of the thousand."""
    by_step_before = {c.step: c for c in reversed(before)}
    by_step_after = {c.step: c for c in reversed(after)}
    steps = sorted(set(by_step_before) & set(by_step_after))
    model_call = after[0] if after else before[0] if before else None
    check = RunsCheck(before_calls=len(before), after_calls=len(after), compared_steps=len(steps),
                      before_change_rate=_change_rate(before), after_change_rate=_change_rate(after))
    if model_call is not None:
        check.model, check.provider = model_call.model, model_call.provider
    if prices is not None:
        check.prices, check.prices_source = dict(prices), "given prices"
    elif model_call is not None and model_call.prices:
        check.prices, check.prices_source = dict(model_call.prices), "the server's price book"
    check.missing_prefix = not any(c.segments for c in before) or not any(c.segments for c in after)
    if check.missing_prefix:
        return check
    for step in steps:
        old, new = by_step_before[step], by_step_after[step]
        change = compare_prefixes(old.segments, new.segments)
        if change is not None:
            check.changes.append(StepChange(step=step, before_call=old.call_id, after_call=new.call_id, change=change))
    if check.changes:
        first = check.changes[0].change
        check.extra_cost_per_call = extra_cost(first.tokens_lost, check.prices, provider=check.provider)
        misses = max(1.0, 1000 * (check.after_change_rate - check.before_change_rate))
        check.extra_cost_per_1000_calls = check.extra_cost_per_call * misses
    return check


def dumps(check: RunsCheck) -> str:
    return json.dumps(check.to_json(), indent=2, ensure_ascii=False)


# --------------------------------------------------------------------------- #
# The command: ctxkit check-prefix


class CheckError(Exception):
    """A run that cannot be read: the command says why and exits 2."""


def fetch_run(host: str, key: str, run_id: str, *, timeout: float = 30.0, max_calls: int = 500) -> list[dict[str, Any]]:
    """A run's calls with their prefix segments from a ctxview server (a read-scoped key):
    ``/api/v1/runs/<id>/calls``, then ``/api/v1/calls/<id>`` for each call, by step."""
    import urllib.error
    import urllib.parse
    import urllib.request

    def get(path: str) -> Any:
        url = path if path.startswith("http") else host.rstrip("/") + path
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}",
                                                       "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return msgspec.json.decode(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            raise CheckError(f"GET {url}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise CheckError(f"GET {url}: {exc}") from None

    quoted = urllib.parse.quote(run_id, safe="")
    page: Any = get(f"/api/v1/runs/{quoted}/calls?limit=500")
    summaries = list(page.get("results") or [])
    while page.get("next") and len(summaries) < max_calls:
        page = get(page["next"])
        summaries += page.get("results") or []
    calls = []
    for summary in summaries[:max_calls]:
        calls.append(get(f"/api/v1/calls/{urllib.parse.quote(str(summary['call_id']), safe='')}"))
    if not calls:
        raise CheckError(f"run {run_id!r} has no calls")
    return calls


def _one_run(records: list[dict[str, Any]], wanted: str | None, source: str) -> list[CallPrefix]:
    runs = sorted({str(r.get("run_id")) for r in records if r.get("run_id") is not None})
    if wanted is not None:
        if wanted not in runs:
            raise CheckError(f"{source}: no run {wanted!r} (runs: {', '.join(runs) or 'none'})")
        return run_prefixes(records, wanted)
    if len(runs) > 1:
        raise CheckError(f"{source} holds {len(runs)} runs ({', '.join(runs[:10])}): choose one with "
                         "--before-run / --after-run")
    if not records:
        raise CheckError(f"{source}: no manifests")
    return run_prefixes(records)


def parse_prices(text: str) -> dict[str, float]:
    """``input=1,cache_read=0.1,cache_write=1.25[,output=4]`` (per 1k tokens) -> a price row."""
    prices = dict(DEFAULT_PRICES)
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        key = f"{name.strip().removesuffix('_per_1k')}_per_1k"
        if key not in DEFAULT_PRICES:
            raise ValueError(f"unknown price {name!r}: use input, cache_read, cache_write, output")
        prices[key] = float(value)
    return prices


def command(args: Any) -> int:
    """``ctxkit check-prefix``: 0 when the prefix is unchanged, 1 when it changed, 2 when a run
    cannot be read."""
    import sys

    from ctxkit.record.transport import ctxview_api_key

    try:
        prices = parse_prices(args.prices) if args.prices else None
        host = args.host
        if host:
            key = ctxview_api_key(args.key)
            if not key:
                raise CheckError("no read key (use --key or set CTXVIEW_API_KEY)")
            before = run_prefixes(fetch_run(host, key, args.before, timeout=args.timeout))
            after = run_prefixes(fetch_run(host, key, args.after, timeout=args.timeout))
        else:
            try:
                before_records, after_records = read_manifests_file(args.before), read_manifests_file(args.after)
            except OSError as exc:
                raise CheckError(str(exc)) from None
            before = _one_run(before_records, args.before_run, args.before)
            after = _one_run(after_records, args.after_run, args.after)
    except (CheckError, ValueError, msgspec.MsgspecError) as exc:
        print(f"ctxkit check-prefix: {exc}", file=sys.stderr)
        return 2
    check = check_runs(before, after, prices=prices)
    print(dumps(check) if args.json else check.report())
    if check.missing_prefix:
        return 2
    return 1 if check.changed else 0
