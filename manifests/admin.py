from django.contrib import admin

from manifests import retention
from manifests.models import ApiKey, Call, Membership, Project, Run


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    # Django's own cascade would load every call (raw manifest included) to delete it;
    # the retention service deletes table by table with set-based statements instead.
    def delete_model(self, request, obj):
        retention.delete_project(project=obj)

    def delete_queryset(self, request, queryset):
        for project in queryset:
            retention.delete_project(project=project)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    # The raw key is never stored, so it cannot be shown here: keys are created with
    # `manage.py createproject`, which prints it once.
    list_display = ["prefix", "name", "project", "can_ingest", "can_read", "created", "revoked_at"]
    readonly_fields = ["prefix", "hashed", "created"]
    list_filter = ["project"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["run_id", "project", "agent", "model", "first_seen", "last_seen"]
    list_filter = ["project", "agent"]
    search_fields = ["run_id"]


@admin.register(Call)
class CallAdmin(admin.ModelAdmin):
    list_display = ["call_id", "project", "agent", "model", "step", "started_at", "input_tokens", "analyzed_at"]
    list_filter = ["project", "agent", "model"]
    search_fields = ["call_id"]
    raw_id_fields = ["run"]


# --------------------------------------------------------------------------- #
# Analysis (manifests/analysis/). The price table is edited here; the other
# tables are derived by the analysis and shown read-only.

from manifests.models import (  # noqa: E402 - appended section, kept apart from the foundation's admin
    CacheEvent,
    CompactionFigures,
    ModelPrice,
    PrefixEntry,
    Regression,
    Rollup,
)


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """Relative prices per 1k tokens and cache facts per model pattern (docs/analysis.md).
    A change applies to calls analysed afterwards; re-run the analysis for older ones."""

    list_display = [
        "model_pattern",
        "input_per_1k",
        "output_per_1k",
        "cache_read_per_1k",
        "cache_write_per_1k",
        "cache_ttl_seconds",
        "min_cacheable_tokens",
        "effective_limit_ratio",
        "updated",
    ]
    list_editable = [
        "input_per_1k",
        "output_per_1k",
        "cache_read_per_1k",
        "cache_write_per_1k",
        "cache_ttl_seconds",
        "min_cacheable_tokens",
        "effective_limit_ratio",
    ]
    search_fields = ["model_pattern"]


class _ReadOnlyAdmin(admin.ModelAdmin):
    """Derived rows: recomputed by the analysis, so never edited by hand."""

    def has_add_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False


@admin.register(Regression)
class RegressionAdmin(_ReadOnlyAdmin):
    list_display = [
        "detected_at",
        "project",
        "agent",
        "model",
        "baseline_rate",
        "current_rate",
        "drop_points",
        "cause",
        "changed_segment",
        "notified_at",
        "notify_attempts",
    ]
    list_filter = ["project", "cause"]
    raw_id_fields = ["call"]


@admin.register(PrefixEntry)
class PrefixEntryAdmin(_ReadOnlyAdmin):
    list_display = ["prefix_hash", "project", "calls", "tokens", "first_seen", "last_seen"]
    list_filter = ["project"]
    search_fields = ["prefix_hash"]


@admin.register(CacheEvent)
class CacheEventAdmin(_ReadOnlyAdmin):
    list_display = ["call", "project", "cause", "changed_segment", "gap_seconds", "hit_ratio", "started_at"]
    list_filter = ["project", "cause"]
    raw_id_fields = ["call", "previous_call"]


@admin.register(CompactionFigures)
class CompactionFiguresAdmin(_ReadOnlyAdmin):
    list_display = ["compaction", "project", "call", "ratio_r", "distortion_d", "failed", "started_at"]
    list_filter = ["project", "failed"]
    raw_id_fields = ["compaction", "call"]


@admin.register(Rollup)
class RollupAdmin(_ReadOnlyAdmin):
    list_display = ["start", "bucket", "project", "agent", "model", "calls", "input_tokens", "cost"]
    list_filter = ["project", "bucket"]
