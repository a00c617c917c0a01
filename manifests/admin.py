from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from manifests import price_rows
from manifests.models import ApiKey, Call, Membership, Project, Run
from manifests.storage import retention


class MembershipInline(admin.TabularInline[Membership, Project]):
    model = Membership
    extra = 0


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin[Project]):
    list_display = ["name", "slug", "created"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    # Django's own cascade would load every call (raw manifest included) to delete it;
    # the retention service deletes table by table with set-based statements instead.
    def delete_model(self, request: HttpRequest, obj: Project) -> None:
        retention.delete_project(project=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Project]) -> None:
        for project in queryset:
            retention.delete_project(project=project)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[ApiKey]):
    # The raw key is never stored, so it cannot be shown here: keys are created with
    # `manage.py createproject`, which prints it once.
    list_display = ["prefix", "name", "project", "can_ingest", "can_read", "created", "revoked_at"]
    readonly_fields = ["prefix", "hashed", "created"]
    list_filter = ["project"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin[Run]):
    list_display = ["run_id", "project", "agent", "model", "first_seen", "last_seen"]
    list_filter = ["project", "agent"]
    search_fields = ["run_id"]


class AnalysisStateFilter(admin.SimpleListFilter):
    """Where a call is in the pipeline; with facets on, each choice shows its count, so the
    backlog of unanalysed calls and the quarantined ones are figures on this page."""

    title = "analysis"
    parameter_name = "analysis"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Call]) -> list[tuple[str, str]]:
        return [("unanalysed", "Not analysed yet"), ("quarantined", "Quarantined (analysis failed)"),
                ("analysed", "Analysed")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Call]) -> QuerySet[Call]:
        if self.value() == "unanalysed":
            return queryset.filter(analyzed_at__isnull=True, quarantined_at__isnull=True)
        if self.value() == "quarantined":
            return queryset.filter(quarantined_at__isnull=False)
        if self.value() == "analysed":
            return queryset.filter(analyzed_at__isnull=False, quarantined_at__isnull=True)
        return queryset


@admin.register(Call)
class CallAdmin(admin.ModelAdmin[Call]):
    list_display = ["call_id", "project", "agent", "model", "step", "started_at", "input_tokens", "analyzed_at",
                    "quarantined_at", "analysis_error"]
    list_filter = [AnalysisStateFilter, "project", "agent", "model"]
    show_facets = admin.ShowFacets.ALWAYS
    search_fields = ["call_id"]
    raw_id_fields = ["run"]
    readonly_fields = ["analyzed_at", "quarantined_at", "analysis_error"]


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


class PriceRowForm(forms.ModelForm[ModelPrice]):
    """The price table's forms (a row, and the editable list): checked by the price rows'
    serializer, each bad field named."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        try:
            price_rows.check_row(data, partial=True)
        except price_rows.PriceRowInputError as exc:
            for error in exc.errors:
                self.add_error(error.path if error.path in self.fields else None, error.message)
        return data


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin[ModelPrice]):
    """Relative prices per 1k tokens and cache facts per model pattern (docs/analysis.md).
    A change applies to calls analysed afterwards; re-run the analysis for older ones."""

    form = PriceRowForm

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> type[forms.ModelForm[ModelPrice]]:
        return super().get_changelist_form(request, form=PriceRowForm, **kwargs)

    list_display = [
        "model_pattern",
        "input_per_1k",
        "output_per_1k",
        "cache_read_per_1k",
        "cache_write_per_1k",
        "cache_ttl_seconds",
        "min_cacheable_tokens",
        "effective_limit_ratio",
        "input_usd_per_mtok",
        "output_usd_per_mtok",
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


class _ReadOnlyAdmin(admin.ModelAdmin[Any]):  # each subclass shows one derived model
    """Derived rows: recomputed by the analysis, so never edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
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
