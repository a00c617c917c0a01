from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from manifests import api, views

urlpatterns = [
    path("", views.index, name="index"),
    path("p/<slug:slug>/", views.project_runs, name="project-runs"),
    path("p/<slug:slug>/runs/<str:run_id>/", views.run_detail, name="run-detail"),
    path("p/<slug:slug>/calls/<str:call_id>/", views.call_detail, name="call-detail"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/manifests", api.ManifestIngestView.as_view(), name="api-ingest"),
    path("api/v1/runs", api.RunListView.as_view(), name="api-runs"),
    path("api/v1/runs/<str:run_id>/calls", api.RunCallListView.as_view(), name="api-run-calls"),
    path("api/v1/calls/<str:call_id>", api.CallDetailView.as_view(), name="api-call"),
    path("api/v1/schema/manifest.json", api.manifest_json_schema, name="manifest-schema"),
    path("api/schema/", SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]), name="openapi"),
]
