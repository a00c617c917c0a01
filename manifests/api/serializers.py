"""Read-side serializers (the write side validates with ctxkit.manifest)."""

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ctxkit import figures
from ctxkit.breakdown import SEGMENTS
from manifests.analysis.prices import PriceBook
from manifests.figures import ITEM_FIELDS
from manifests.models import Attribution, Call, Compaction, ContextEdit, Evidence, Invariant, Item, Run
from manifests.selectors import window as window_selectors


class RunSerializer(serializers.ModelSerializer[Run]):
    call_count = serializers.IntegerField(read_only=True)

    class Meta:
        model = Run
        fields = ["run_id", "agent", "model", "parent_run_id", "first_seen", "last_seen", "call_count", "cwd",
                  "git_branch"]


class CallSummarySerializer(serializers.ModelSerializer[Call]):
    run_id = serializers.CharField(source="run.run_id", read_only=True)
    uncached_input_tokens = serializers.IntegerField(read_only=True)
    # ctxkit.figures.hit_rate: null when the call had no input.
    cache_hit_ratio = serializers.FloatField(read_only=True, allow_null=True)
    # The stored figures (docs/analysis.md): null until the call is analysed; cost_usd also null
    # when the model has no USD price (neither genai-prices' table nor a price row has one).
    cost = serializers.FloatField(source="figures.cost", read_only=True, default=None, allow_null=True,
                                  help_text="The call's cost in relative units (ctxkit.figures.cost_units)")
    cost_usd = serializers.FloatField(source="figures.cost_usd", read_only=True, default=None, allow_null=True,
                                      help_text="The call's cost in US dollars (ctxkit.figures.cost_usd)")

    class Meta:
        model = Call
        fields = [
            "call_id",
            "run_id",
            "step",
            "parent_call_id",
            "agent",
            "model",
            "provider",
            "started_at",
            "ended_at",
            "window",
            "output_reserve",
            "safety_margin",
            "input_cap",
            "prefix_hash",
            "prefix_tokens",
            "input_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "cache_write_1h_tokens",
            "output_tokens",
            "reasoning_tokens",
            "uncached_input_tokens",
            "cache_hit_ratio",
            "cost",
            "cost_usd",
            "status",
            "finish_reason",
            "verified",
            "item_count",
            "evidence_count",
            "evidence_missing",
            "received_at",
            "analyzed_at",
        ]


class ItemSerializer(serializers.ModelSerializer[Item]):
    id = serializers.CharField(source="item_id")
    in_context = serializers.SerializerMethodField()
    context_tokens = serializers.SerializerMethodField()

    class Meta:
        model = Item
        fields = ["id", *ITEM_FIELDS[1:], "in_context", "context_tokens"]

    def get_in_context(self, item: Item) -> bool:
        return figures.in_context(item)

    def get_context_tokens(self, item: Item) -> int:
        return figures.context_tokens(item)


class EvidenceSerializer(serializers.ModelSerializer[Evidence]):
    class Meta:
        model = Evidence
        fields = ["key", "label", "literal", "expected_item", "present", "found_in", "used"]


class AttributionSerializer(serializers.ModelSerializer[Attribution]):
    """A cause of missing evidence (is_risk false) or a risk flag on present evidence."""

    # Null unless the evidence was lost at an earlier call of the run (the cause was traced there).
    lost_at_call_id = serializers.CharField(source="lost_at.call_id", read_only=True, default=None, allow_null=True)
    lost_at_step = serializers.IntegerField(source="lost_at.step", read_only=True, default=None, allow_null=True)

    class Meta:
        model = Attribution
        fields = ["evidence_key", "cause", "is_risk", "item_id", "action", "reason", "fix", "lost_at_call_id",
                  "lost_at_step"]


class InvariantSerializer(serializers.ModelSerializer[Invariant]):
    class Meta:
        model = Invariant
        fields = ["name", "ok", "detail", "lost"]


class CompactionSerializer(serializers.ModelSerializer[Compaction]):
    id = serializers.CharField(source="event_id")
    invariants = InvariantSerializer(many=True, read_only=True)
    # Annotated by the call endpoint (manifests.figures): the re-reads it caused and its net saving.
    reread_tokens = serializers.IntegerField(read_only=True, help_text="Re-read tokens of the re-reads it caused")
    net_saving = serializers.IntegerField(
        read_only=True, help_text="ctxkit.figures.net_saving: tokens_before - tokens_after - reread_tokens")

    class Meta:
        model = Compaction
        fields = [
            "id",
            "strategy",
            "trigger",
            "tokens_before",
            "tokens_after",
            "reread_tokens",
            "net_saving",
            "kept_turns",
            "summary_item",
            "failed_invariants",
            "invariants",
        ]


class ContextEditSerializer(serializers.ModelSerializer[ContextEdit]):
    class Meta:
        model = ContextEdit
        fields = ["type", "cleared_count", "cleared_tokens", "kept", "item_ids"]


def _numbers(**described: str) -> dict[str, dict[str, str]]:
    return {name: {"type": "integer", "description": text} for name, text in described.items()}


# The OpenAPI schema of a call's ``window_breakdown`` (manifests.selectors.window.call_breakdown).
WINDOW_BREAKDOWN_SCHEMA: dict[str, Any] = {
    "type": "object", "nullable": True,
    "description": "The window by category, as the call page's window panel shows it (ctxkit.breakdown); "
                   "null for a call without items.",
    "properties": {
        **_numbers(window="the model's context window", input_read="the provider's input, else the items' tokens "
                   "in context", counted="the items' tokens in context", over="input read beyond the window",
                   builtin_tools="built-in tool definitions in context", mcp_tools="MCP tool definitions in context"),
        "utilization": {"type": "number", "description": "input read / window"},
        "categories": {"type": "array", "description": "one row per segment, in the bar's order", "items": {
            "type": "object", "properties": {
                "category": {"type": "string", "enum": list(SEGMENTS)},
                "label": {"type": "string"},
                "tokens": {"type": "integer"},
                "share": {"type": "number", "description": "share of the window, 0..1"},
                "count": {"type": ["integer", "null"],
                          "description": "tool definitions (the two tool categories only)"},
            }, "required": ["category", "label", "tokens", "share", "count"]}},
        "memory_files": {"type": "array", "items": {"type": "string"},
                         "description": "where the memory items in context came from (their source_ref)"},
    },
    "required": ["window", "input_read", "counted", "over", "utilization", "categories", "builtin_tools",
                 "mcp_tools", "memory_files"],
}


class CallDetailSerializer(CallSummarySerializer):
    prefix_segments = serializers.JSONField(read_only=True)
    warnings = serializers.JSONField(read_only=True)
    items = ItemSerializer(many=True, read_only=True)
    evidence = EvidenceSerializer(many=True, read_only=True)
    compactions = CompactionSerializer(many=True, read_only=True)
    context_edits = ContextEditSerializer(many=True, read_only=True)
    # Set by the view from selectors.calls.attributions: losses before risks, each with its
    # lost-at call read within the run's time span.
    attributions = AttributionSerializer(source="attribution_rows", many=True, read_only=True)
    context_tokens = serializers.SerializerMethodField()
    input_read = serializers.SerializerMethodField()
    headroom = serializers.SerializerMethodField()
    prices = serializers.SerializerMethodField()
    window_breakdown = serializers.SerializerMethodField()

    class Meta(CallSummarySerializer.Meta):
        fields = CallSummarySerializer.Meta.fields + [
            "builder_name",
            "builder_version",
            "prefix_segments",
            "warnings",
            "items",
            "evidence",
            "compactions",
            "context_edits",
            "attributions",
            "context_tokens",
            "input_read",
            "headroom",
            "prices",
            "window_breakdown",
        ]

    def get_context_tokens(self, call: Call) -> int:
        """ctxkit.figures.total_context_tokens of the call's items."""
        return figures.total_context_tokens(call.items.all())

    def get_input_read(self, call: Call) -> int:
        """ctxkit.figures.input_read: the provider's input, else the tokens in context."""
        return figures.input_read(call.input_tokens, self.get_context_tokens(call))

    def get_headroom(self, call: Call) -> int:
        """ctxkit.figures.headroom: how many more input tokens could have gone in."""
        return figures.headroom(call.input_cap, self.get_input_read(call))

    @extend_schema_field(WINDOW_BREAKDOWN_SCHEMA)
    def get_window_breakdown(self, call: Call) -> dict[str, Any] | None:
        """The window by category, the call page's panel in numbers (null for a call without items)."""
        return window_selectors.call_breakdown(call, list(call.items.all()))

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_prices(self, call: Call) -> dict[str, float | None]:
        """The call's model's row of the price book, per 1k tokens in relative units (what the
        call's cost is computed with; ``ctxkit check-prefix`` prices a broken prefix with it),
        and its USD prices per million tokens (what its ``cost_usd`` is computed with; null
        when the model has none)."""
        book = PriceBook.load()
        price = book.for_model(call.model)
        usd = book.usd(call.model, call.provider, call.input_tokens, call.started_at)

        def per_mtok(value: float | None) -> float | None:
            return None if value is None else round(value * 1_000_000, 9)

        return {"input_per_1k": price.input_per_1k, "output_per_1k": price.output_per_1k,
                "cache_read_per_1k": price.cache_read_per_1k, "cache_write_per_1k": price.cache_write_per_1k,
                "input_usd_per_mtok": per_mtok(usd.input if usd else None),
                "output_usd_per_mtok": per_mtok(usd.output if usd else None),
                "cache_read_usd_per_mtok": per_mtok(usd.cache_read if usd else None),
                "cache_write_usd_per_mtok": per_mtok(usd.cache_write if usd else None),
                "cache_write_1h_usd_per_mtok": per_mtok(usd.cache_write_1h if usd else None)}
