"""ctxkit: build a model call's context within budget and record its manifest.

Every name below is importable from ``ctxkit`` directly (``from ctxkit import Client,
ContextBuilder``). The submodules are loaded on first use (PEP 562), so ``import ctxkit`` costs
about a millisecond and an agent that only sends manifests never loads the allocator.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> submodule that defines it
_EXPORTS: dict[str, str] = {
    "__version__": "version",
    # the manifest schema
    **dict.fromkeys(
        (
            "SCHEMA_V1", "Manifest", "Item", "Evidence", "Compaction", "Invariant", "ContextEdit", "Usage", "Budget",
            "Prefix", "PrefixSegment", "Outcome", "Claim", "Builder", "Workspace", "FieldError", "convert_manifest",
            "decode_manifest", "json_schema",
        ),
        "manifest",
    ),
    # building a manifest
    "build_manifest": "record.assemble",
    **dict.fromkeys(("ContextBuilder", "BuiltContext", "blocks_from_plan"), "record.builder"),
    **dict.fromkeys(("record_items", "projection_items", "block_items", "short_id", "UNTRUSTED_KINDS"), "record.items"),
    # tokens
    **dict.fromkeys(
        ("estimate_tokens", "clip", "bpe_estimator", "count_cjk", "file_report", "Estimator"), "context.tokens"
    ),
    # grouping and budgeted projection
    **dict.fromkeys(("group_interactions", "project", "Group", "Projection"), "context.grouping"),
    # allocator
    **dict.fromkeys(("Segment", "allocate", "Plan", "Allocation"), "context.allocator"),
    # operators
    **dict.fromkeys(
        (
            "OpRecord", "normalize", "content_key", "dedupe_lines", "dedupe_items", "jaccard_5gram",
            "merge_near_duplicates", "merge_near_duplicate_lines", "score_line", "extract_lines", "summarize_lines",
            "ref_replace", "truncate_head_tail", "sliding_window", "compress_schema",
        ),
        "context.operators",
    ),
    # key-field read-back
    **dict.fromkeys(("KeyField", "ReadBack", "read_back", "to_evidence", "format_readback"), "context.readback"),
    # compaction and clearing
    **dict.fromkeys(
        (
            "Record", "compact", "should_compact", "clear_tool_results", "CompactionResult", "ClearResult",
        ),
        "context.compaction",
    ),
    **dict.fromkeys(("Summary", "extractive_summarizer"), "context.summary"),
    # layout and caching
    **dict.fromkeys(("Block", "Layout", "arrange", "volatile_warnings", "canonical_json"), "context.layout"),
    # handoff summaries
    **dict.fromkeys(("check_handoff", "validate_handoff", "HandoffReport"), "context.handoff"),
    # provider usage
    **dict.fromkeys(
        ("normalize_usage", "detect_provider", "applied_edits_to_manifest", "uncached_input_tokens", "cache_hit_ratio"),
        "record.usage",
    ),
    # memory write-back and context editing
    **dict.fromkeys(("Memory", "Fact"), "context.memory"),
    "clear_thinking": "context.editing",
    # cost and caching
    **dict.fromkeys(
        ("cost", "cost_usd", "run_cost", "RunCost", "cache_saving", "cache_break_even", "ttl_expired"), "costs"
    ),
    # model facts: context windows and USD prices (genai-prices' bundled table)
    **dict.fromkeys(("model_facts", "ModelFacts", "UsdPrices", "window_for"), "models"),
    # the window by category (an agent's /context)
    **dict.fromkeys(("window_breakdown", "WindowBreakdown"), "breakdown"),
    # prefix stability in an agent's tests (docs/sdk.md, "Catch cache breaks in CI")
    **dict.fromkeys(("assert_prefix_stable", "scan_prefix"), "testing"),
    # sending
    "Client": "record.client",
    "Spool": "record.spool",
    # recording calls of the anthropic / openai clients
    "instrument": "instrumentation",
}

# Kept literal (static tools read it); a test checks it lists exactly the names above.
__all__ = [
    "__version__",
    "SCHEMA_V1",
    "Manifest",
    "Item",
    "Evidence",
    "Compaction",
    "Invariant",
    "ContextEdit",
    "Usage",
    "Budget",
    "Prefix",
    "PrefixSegment",
    "Outcome",
    "Claim",
    "Builder",
    "Workspace",
    "FieldError",
    "convert_manifest",
    "decode_manifest",
    "json_schema",
    "build_manifest",
    "ContextBuilder",
    "BuiltContext",
    "blocks_from_plan",
    "record_items",
    "projection_items",
    "block_items",
    "short_id",
    "UNTRUSTED_KINDS",
    "estimate_tokens",
    "clip",
    "bpe_estimator",
    "count_cjk",
    "file_report",
    "Estimator",
    "group_interactions",
    "project",
    "Group",
    "Projection",
    "Segment",
    "allocate",
    "Plan",
    "Allocation",
    "OpRecord",
    "normalize",
    "content_key",
    "dedupe_lines",
    "dedupe_items",
    "jaccard_5gram",
    "merge_near_duplicates",
    "merge_near_duplicate_lines",
    "score_line",
    "extract_lines",
    "summarize_lines",
    "ref_replace",
    "truncate_head_tail",
    "sliding_window",
    "compress_schema",
    "KeyField",
    "ReadBack",
    "read_back",
    "to_evidence",
    "format_readback",
    "Record",
    "Summary",
    "compact",
    "should_compact",
    "extractive_summarizer",
    "clear_tool_results",
    "CompactionResult",
    "ClearResult",
    "Block",
    "Layout",
    "arrange",
    "volatile_warnings",
    "canonical_json",
    "check_handoff",
    "validate_handoff",
    "HandoffReport",
    "normalize_usage",
    "detect_provider",
    "applied_edits_to_manifest",
    "uncached_input_tokens",
    "cache_hit_ratio",
    "Memory",
    "Fact",
    "clear_thinking",
    "cost",
    "run_cost",
    "window_breakdown",
    "WindowBreakdown",
    "RunCost",
    "cache_saving",
    "cache_break_even",
    "ttl_expired",
    "cost_usd",
    "model_facts",
    "ModelFacts",
    "UsdPrices",
    "window_for",
    "assert_prefix_stable",
    "scan_prefix",
    "Client",
    "Spool",
    "instrument",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ctxkit.{module}"), name)
    globals()[name] = value  # next access skips __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from ctxkit.breakdown import WindowBreakdown, window_breakdown
    from ctxkit.context.allocator import Allocation, Plan, Segment, allocate
    from ctxkit.context.compaction import (
        ClearResult,
        CompactionResult,
        Record,
        clear_tool_results,
        compact,
        should_compact,
    )
    from ctxkit.context.editing import clear_thinking
    from ctxkit.context.grouping import Group, Projection, group_interactions, project
    from ctxkit.context.handoff import HandoffReport, check_handoff, validate_handoff
    from ctxkit.context.layout import Block, Layout, arrange, canonical_json, volatile_warnings
    from ctxkit.context.memory import Fact, Memory
    from ctxkit.context.operators import (
        OpRecord,
        compress_schema,
        content_key,
        dedupe_items,
        dedupe_lines,
        extract_lines,
        jaccard_5gram,
        merge_near_duplicate_lines,
        merge_near_duplicates,
        normalize,
        ref_replace,
        score_line,
        sliding_window,
        summarize_lines,
        truncate_head_tail,
    )
    from ctxkit.context.readback import KeyField, ReadBack, format_readback, read_back, to_evidence
    from ctxkit.context.summary import Summary, extractive_summarizer
    from ctxkit.context.tokens import Estimator, bpe_estimator, clip, count_cjk, estimate_tokens, file_report
    from ctxkit.costs import RunCost, cache_break_even, cache_saving, cost, cost_usd, run_cost, ttl_expired
    from ctxkit.instrumentation import instrument
    from ctxkit.manifest import (
        SCHEMA_V1,
        Budget,
        Builder,
        Claim,
        Compaction,
        ContextEdit,
        Evidence,
        FieldError,
        Invariant,
        Item,
        Manifest,
        Outcome,
        Prefix,
        PrefixSegment,
        Usage,
        Workspace,
        convert_manifest,
        decode_manifest,
        json_schema,
    )
    from ctxkit.models import ModelFacts, UsdPrices, model_facts, window_for
    from ctxkit.record.assemble import build_manifest
    from ctxkit.record.builder import BuiltContext, ContextBuilder, blocks_from_plan
    from ctxkit.record.client import Client
    from ctxkit.record.items import UNTRUSTED_KINDS, block_items, projection_items, record_items, short_id
    from ctxkit.record.spool import Spool
    from ctxkit.record.usage import (
        applied_edits_to_manifest,
        cache_hit_ratio,
        detect_provider,
        normalize_usage,
        uncached_input_tokens,
    )
    from ctxkit.testing import assert_prefix_stable, scan_prefix
    from ctxkit.version import __version__
