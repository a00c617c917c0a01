"""A manifest from a model call that ctxkit did not build: the request as sent and the usage.

Shared by ``ctxkit.instrument`` (the Anthropic and OpenAI clients) and the server's OTLP
ingest (manifests/ingest/otlp.py), so both infer items, kinds, tokens and prefix segments the same
way. Each adapter turns its request into :class:`Part` s (one per system block, tool
definition, message content block) and names the prefix segments (text per segment, in the
provider's cache order); :func:`call_manifest` does the rest.

Kinds: system -> ``system``; a tool definition -> ``tools``; a memory file the agent injects as user
text -> ``memory`` (ctxkit.agents.memory_files: its ``source_ref`` names the files); the first other user
text -> ``task``; a later last user text -> ``user``; other user and assistant turns -> ``history``; a tool call and
its result share a ``group`` (the tool call id), the result is ``tool_result`` (untrusted); a
compaction block -> ``summary``. Every item was sent (action ``keep``), with tokens from
ctxkit's estimator; its id is its path in the request, its label what the agent calls it
(:mod:`ctxkit.record.labels`: a tool by its name, a message by role and turn).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from ctxkit.agents import memory_files
from ctxkit.context.layout import canonical_json
from ctxkit.context.prefix_lines import prefix_segment
from ctxkit.context.tokens import estimate_tokens
from ctxkit.manifest import (
    MAX_EVIDENCE,
    MAX_ITEMS,
    MAX_NAME,
    MAX_SEGMENTS,
    MAX_TEXT,
    Budget,
    Builder,
    ContextEdit,
    Evidence,
    Item,
    Manifest,
    Outcome,
    Prefix,
    Usage,
    Zone,
    is_item_kind,
)
from ctxkit.models import DEFAULT_WINDOW, WINDOW_ASSUMED, window_for
from ctxkit.record.items import UNTRUSTED_KINDS, clamp_tokens, clip, short_id
from ctxkit.record.labels import item_labels

__all__ = ["Part", "call_manifest", "window_for", "text_of", "infer_kinds", "DEFAULT_WINDOW"]

@dataclass
class Part:
    """One candidate of a plain call: a system block, a tool definition or a message block."""

    role: str  # system, tools, user, assistant, tool
    text: str
    kind: str = ""  # inferred by infer_kinds() when empty
    group: str | None = None  # tool call id: a call and its result share it
    segment: str | None = None  # the prefix segment it belongs to, if any
    source: str = ""  # e.g. "messages[3].content[1]", kept as the item's source_ref
    ref: str | None = None  # the item's source_ref instead of ``source`` (a memory file's path)
    name: str = ""  # a tool definition's, call's or result's tool name, when the mapping knows it


def text_of(value: Any) -> str:
    """Readable text of a content value: strings as they are, text blocks joined, anything
    else as canonical JSON (so tool schemas and arguments hash and count stably)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, dict) and isinstance(v.get("text"), str) for v in value):
        return "\n".join(v["text"] for v in value)
    return canonical_json(value)


def infer_kinds(parts: list[Part]) -> None:
    """Fill in the kind of parts that have none (see the module notes)."""
    for p in parts:
        if not p.kind and p.role == "user":
            files = memory_files(p.text)
            if files:
                p.kind, p.ref = "memory", ", ".join(files)
    user_texts = [i for i, p in enumerate(parts) if not p.kind and p.role == "user"]
    first, last = (user_texts[0], user_texts[-1]) if user_texts else (-1, -1)
    for index, p in enumerate(parts):
        if p.kind:
            continue
        if p.role == "system":
            p.kind = "system"
        elif p.role == "tools":
            p.kind = "tools"
        elif p.role == "tool":
            p.kind = "tool_result"
        elif index == first:
            p.kind = "task"  # a lone user text is the task, even when tool turns follow it
        elif index == last:
            p.kind = "user"
        else:
            p.kind = "history"


_SOURCE_PREFIXES = ("gen_ai.input.", "gen_ai.", "llm.input_", "llm.")


def _item_id(part: Part, position: int) -> str:
    """The item's id: where it sits in the request (``messages[3].content[1]``), so the same
    message keeps its id from call to call and the call view's diff matches it up."""
    source = part.source
    if source.startswith(_SOURCE_PREFIXES):  # an OTLP attribute's name
        prefix = next(p for p in _SOURCE_PREFIXES if source.startswith(p))
        source = source[len(prefix):]
    return short_id(source or f"{part.kind}-{position}")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@lru_cache(maxsize=4096)
def _text_facts(text: str) -> tuple[int, str]:
    """An item text's tokens and content hash. Remembered: a conversation's later calls send its
    earlier texts again (the proxy and ``ctxkit import`` map each call whole)."""
    return clamp_tokens(estimate_tokens(text)), _sha(text)[:32]


def _evidence(keys: Sequence[str] | dict[str, str], items: list[Item], texts: list[str]) -> list[Evidence]:
    """Required evidence: each literal looked up in what was sent (``{key: literal}`` or keys
    that are their own literal)."""
    pairs = list(keys.items()) if isinstance(keys, dict) else [(k, k) for k in keys]
    out = []
    for key, literal in pairs[:MAX_EVIDENCE]:
        found = next((item.id for item, text in zip(items, texts) if literal and literal in text), None)
        out.append(Evidence(key=short_id(str(key)), literal=clip(str(literal), 2000) or None,
                            present=found is not None, found_in=found))
    return out


def call_manifest(
    *,
    call_id: str,
    run_id: str,
    step: int,
    model: str,
    provider: str,
    agent: str,
    started_at: datetime,
    ended_at: datetime | None,
    parts: list[Part],
    segments: Sequence[tuple[str, str]] = (),
    usage: Usage | None = None,
    window: int | None = None,
    output_reserve: int = 0,
    outcome: Outcome | None = None,
    context_edits: Iterable[ContextEdit] = (),
    evidence_keys: Sequence[str] | dict[str, str] = (),
    include_text: bool = True,
    warnings: Iterable[str] = (),
    builder: Builder | None = None,
    parent_call_id: str | None = None,
) -> Manifest:
    """The manifest of one plain call. ``segments``: (name, text) of the cacheable prefix in
    cache order (empty: no prefix recorded)."""
    notes = list(warnings)
    infer_kinds(parts)
    labels = item_labels(parts)  # over every part, so turns count from the conversation's start
    if len(parts) > MAX_ITEMS:
        notes.append(f"{len(parts) - MAX_ITEMS} oldest items left out (limit {MAX_ITEMS})")
        parts = parts[:1] + parts[len(parts) - MAX_ITEMS + 1:]
        labels = labels[:1] + labels[len(labels) - MAX_ITEMS + 1:]
    items: list[Item] = []
    texts: list[str] = []
    last = len(parts) - 1
    for position, p in enumerate(parts):
        tokens, content_hash = _text_facts(p.text)
        item_id = _item_id(p, position)
        zone: Zone = "head" if p.segment in ("system", "tools") else ("tail" if position == last else "middle")
        items.append(Item(
            # infer_kinds gave every part one of the item kinds
            id=item_id, kind=p.kind if is_item_kind(p.kind) else "other", action="keep",
            requested_tokens=tokens, granted_tokens=tokens,
            used_tokens=tokens, position=position, zone=zone,
            trust="untrusted" if p.kind in UNTRUSTED_KINDS else "trusted",
            group=short_id(p.group) if p.group else None,
            source_ref=clip(p.ref or p.source, 1000) if p.ref or p.source else None,
            content_hash=content_hash,
            text=clip(p.text, MAX_TEXT) if include_text and p.text else None,
            label=labels[position] or None,
        ))
        texts.append(p.text)

    prefix = None
    if segments:
        segs = [
            prefix_segment(name=clip(name, MAX_NAME), hash=_sha(text), tokens=clamp_tokens(estimate_tokens(text)),
                           text=text, include_text=include_text)
            for name, text in list(segments)[:MAX_SEGMENTS]
        ]
        prefix = Prefix(hash=_sha("".join(s.hash for s in segs)), tokens=clamp_tokens(sum(s.tokens for s in segs)),
                        segments=segs)

    known = window is not None
    if window is None:
        window, known = window_for(model, provider)
    if not known:
        notes.append(f"{WINDOW_ASSUMED}: {window} tokens; the model table does not know {model or 'this model'}"
                     " (pass window=)")
    window = max(1, clamp_tokens(window))
    reserve = min(clamp_tokens(output_reserve), window)
    return Manifest(
        schema="ctxview.manifest/v1",
        call_id=short_id(call_id),
        run_id=short_id(run_id),
        step=min(max(step, 0), 10_000_000),
        model=clip(model or "unknown", MAX_NAME),
        provider=clip(provider, MAX_NAME),
        agent=clip(agent or "default", MAX_NAME),
        parent_call_id=short_id(parent_call_id) if parent_call_id else None,
        started_at=started_at.astimezone(UTC),
        ended_at=max(ended_at, started_at).astimezone(UTC) if ended_at else None,
        budget=Budget(window=window, output_reserve=reserve),
        builder=builder,
        prefix=prefix,
        usage=usage or Usage(),
        items=items,
        evidence=_evidence(evidence_keys, items, texts),
        context_edits=list(context_edits)[:100],
        outcome=outcome,
        warnings=[clip(w, 2000) for w in notes][:100],
    )
