from django.apps import AppConfig


class ManifestsConfig(AppConfig):
    name = "manifests"
    default_auto_field = "django.db.models.BigAutoField"
