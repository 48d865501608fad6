from __future__ import annotations

from django.apps import AppConfig, apps
from django.conf import settings


class SchemalessStoreConfig(AppConfig):
    name = "schemaless_store"
    verbose_name = "Schemaless store"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, signals  # noqa: F401 - registers the system checks
        from .config.indexes import registry
        from .kinds import checks as kind_checks  # noqa: F401 - and the kinds' ones

        signals.connect()
        user = getattr(settings, "SCHEMALESS", None)
        module = user.get("INDEX_MODULE", "indexes") if isinstance(user, dict) else "indexes"
        registry.autodiscover((app.module for app in apps.get_app_configs()), module)
