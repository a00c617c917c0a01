from django.contrib import admin

from manifests.models import ApiKey, Call, Membership, Project, Run


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "created"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    # The raw key is never stored; keys are created with `manage.py createproject`
    # or `manage.py createkey`, which print it once.
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
