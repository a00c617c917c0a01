"""Helpers for the analysis tests: items and prefixes as ctxkit makes them, and a run that
loses its evidence to a hard cut (manifests from tests/support.py)."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from ctxkit.manifest import Budget, Evidence, Item, Prefix, PrefixSegment, Usage
from tests.support import T0, manifest


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def prefix(**segments: tuple[str, int]) -> Prefix:
    """A stable prefix from named segments (content, tokens), hashed like ctxkit's layout."""
    parts = [PrefixSegment(name=name, hash=sha(content), tokens=tokens) for name, (content, tokens) in segments.items()]
    return Prefix(
        hash=sha("".join(p.hash for p in parts)),
        tokens=sum(p.tokens for p in parts),
        segments=parts,
    )


SYSTEM = ("You are a careful refund analyst. Cite evidence by id.", 600)
TOOLS = ('[{"name": "get_refund"}, {"name": "get_logs"}]', 900)
STABLE = prefix(system=SYSTEM, tools=TOOLS)


def item(item_id: str, kind: str = "retrieval", action: str = "keep", tokens: int = 100, **extra: Any) -> Item:
    used = 0 if action in {"drop", "dedupe", "clear"} else extra.pop("used", tokens)
    return Item(
        id=item_id,
        kind=kind,
        action=action,
        requested_tokens=extra.pop("requested", tokens),
        granted_tokens=extra.pop("granted", used),
        used_tokens=used,
        **extra,
    )


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def flush_rollups() -> int:
    """Refresh the dirty rollup buckets now, as the beat task does every interval (with the
    interval 0 of the SQLite test runs the analysis has done it already: then 0). For the
    tests whose subject is the rollups' content, not their timing."""
    from manifests.analysis import rollups

    return rollups.refresh()


CUT = "budget exhausted: cut at 120 of 900 tokens, the tail was removed"


def _hard_cut_step(n: int, run_id: str, *, example_action: str = "keep", present: bool | None = True,
                   input_tokens: int = 5230, window: int = 32_000, reserve: int = 600) -> dict:
    cut = example_action == "hard_cut"
    example = item("example-6", kind="example", action=example_action, tokens=900, used=120 if cut else 900,
                   reason=CUT if cut else "")
    # 4,898 tokens in context (at steps 3 and 4): the provider counted 5,230 (the question, framing).
    items = [item("system", kind="system", tokens=698), item("history", kind="history", tokens=3300), example]
    evidence = [] if present is None else [Evidence(key="refund-limit", literal="500 EUR", expected_item="example-6",
                                                    present=present, found_in="example-6" if present else None)]
    return manifest(f"{run_id}/step-{n}", bare=True, run_id=run_id, step=n, items=items, evidence=evidence,
                    usage=Usage(input_tokens=input_tokens, output_tokens=80), started_at=T0 + timedelta(minutes=n),
                    budget=Budget(window=window, output_reserve=reserve))


def hard_cut_run(run_id: str = "run-7") -> list[dict]:
    """A run whose evidence ``refund-limit`` is present at steps 0 and 1, cut away at step 2 by a
    ``hard_cut`` of its item ``example-6`` (with the builder's reason ``CUT``), undeclared at
    step 3 (no usage reported, window 9,000, reserve 1,000) and missing again at step 4 (input
    5,230 of an input cap of 31,400 with 4,898 tokens in context)."""
    return [
        _hard_cut_step(0, run_id), _hard_cut_step(1, run_id),
        _hard_cut_step(2, run_id, example_action="hard_cut", present=False),
        _hard_cut_step(3, run_id, present=None, input_tokens=0, window=9000, reserve=1000),
        _hard_cut_step(4, run_id, present=False),
    ]
