from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from manifests import ops, views
from manifests.api import alerts as alerts_api
from manifests.api import facts as facts_api
from manifests.api import otlp as otlp_api
from manifests.api import views as api
from manifests.api.openapi import BrowserJsonRenderer, BrowserYamlRenderer
from manifests.views import settings as settings_views

urlpatterns = [
    # Dashboard. Run and call ids may hold slashes ("run-7/step-3"), hence <path:...> last.
    path("", views.index, name="index"),
    path("p/<slug:slug>/", views.overview, name="overview"),
    path("p/<slug:slug>/runs/", views.runs, name="project-runs"),
    path("p/<slug:slug>/runs/<path:run_id>/", views.run_detail, name="run-detail"),
    path("p/<slug:slug>/calls/", views.calls, name="calls"),
    path("p/<slug:slug>/live/", views.live_page, name="live"),
    path("p/<slug:slug>/live.json", views.live_feed, name="live-feed"),
    path("p/<slug:slug>/calls/<path:call_id>/", views.call_detail, name="call-detail"),
    path("p/<slug:slug>/search/", views.search, name="search"),
    path("p/<slug:slug>/compare/", views.compare, name="compare"),
    path("p/<slug:slug>/export/<slug:kind>.<slug:fmt>", views.export, name="export"),
    path("p/<slug:slug>/evidence/", views.evidence, name="evidence"),
    path("p/<slug:slug>/cache/", views.cache, name="cache"),
    path("p/<slug:slug>/compactions/", views.compactions, name="compactions"),
    path("p/<slug:slug>/settings/", settings_views.project_settings_page, name="project-settings"),
    path("p/<slug:slug>/settings/keys", settings_views.create_key, name="settings-create-key"),
    path("p/<slug:slug>/settings/keys/<int:key_id>/revoke", settings_views.revoke_key, name="settings-revoke-key"),
    path("p/<slug:slug>/settings/members", settings_views.invite_member, name="settings-invite"),
    path("p/<slug:slug>/settings/members/<int:membership_id>", settings_views.change_member,
         name="settings-member"),
    path("p/<slug:slug>/settings/webhook", settings_views.configure_webhook, name="settings-webhook"),
    path("p/<slug:slug>/settings/webhook/test", settings_views.test_webhook, name="settings-webhook-test"),
    path("p/<slug:slug>/settings/alerts", settings_views.create_alert_rule, name="settings-alert-create"),
    path("p/<slug:slug>/settings/alerts/<int:rule_id>/delete", settings_views.delete_alert_rule,
         name="settings-alert-delete"),
    path("p/<slug:slug>/settings/facts", settings_views.create_watched_fact, name="settings-fact-create"),
    path("p/<slug:slug>/settings/facts/<int:fact_id>/delete", settings_views.delete_watched_fact,
         name="settings-fact-delete"),
    path("p/<slug:slug>/whatif.json", views.call_whatif, name="call-whatif"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", ops.healthz, name="healthz"),
    path("api/v1/manifests", api.ManifestIngestView.as_view(), name="api-ingest"),
    path("api/v1/runs", api.RunListView.as_view(), name="api-runs"),
    path("api/v1/runs/<path:run_id>/calls", api.RunCallListView.as_view(), name="api-run-calls"),
    path("api/v1/calls/<path:call_id>", api.CallDetailView.as_view(), name="api-call"),
    path("api/v1/alert-rules", alerts_api.AlertRuleListView.as_view(), name="api-alert-rules"),
    path("api/v1/alert-rules/<int:rule_id>", alerts_api.AlertRuleDetailView.as_view(), name="api-alert-rule"),
    path("api/v1/watched-facts", facts_api.WatchedFactListView.as_view(), name="api-watched-facts"),
    path("api/v1/watched-facts/<int:fact_id>", facts_api.WatchedFactDetailView.as_view(), name="api-watched-fact"),
    path("api/v1/schema/manifest.json", api.manifest_json_schema, name="manifest-schema"),
    # OTLP/HTTP's fixed path: OTEL_EXPORTER_OTLP_ENDPOINT=<ctxview> appends /v1/traces.
    path("v1/traces", otlp_api.traces, name="otlp-traces"),
    path(
        "api/schema/",
        SpectacularAPIView.as_view(
            authentication_classes=[],
            permission_classes=[],
            throttle_classes=[],
            renderer_classes=[BrowserYamlRenderer, BrowserJsonRenderer],
        ),
        name="openapi",
    ),
    # The interactive reference; the split view serves its start-up script as a file, so
    # the Content Security Policy needs no inline script.
    path(
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="openapi", authentication_classes=[], permission_classes=[],
                                            throttle_classes=[]),
        name="api-docs",
    ),
]

handler404 = "manifests.middleware.handler404"
handler500 = "manifests.middleware.handler500"
