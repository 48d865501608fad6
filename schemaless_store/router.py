"""The database router: entities and cells on their shards, everything else on ``default``.

Add ``"schemaless_store.router.ShardRouter"`` to ``DATABASE_ROUTERS``.
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS

from .config import conf

ENTITY_LABEL = "schemaless_store.entity"


class ShardRouter:
    def _entity_alias(self, model: Any, hints: dict[str, Any]) -> str | None:
        if model._meta.label_lower != ENTITY_LABEL:
            return None
        instance = hints.get("instance")
        if instance is not None and getattr(instance, "row_id", None):
            return instance.shard
        return None

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return self._entity_alias(model, hints)

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return self._entity_alias(model, hints)

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        settings = conf.get()
        if any(db in names for names in settings.replicas.values()):
            return False  # a replica gets its tables from its primary, by replication
        is_shard = db in settings.shards
        if app_label == "schemaless_store":
            if model_name in ("entity", "cell", "cellhead"):
                return is_shard
            return db == DEFAULT_DB_ALIAS
        # Shards hold entities and index tables only: no auth, sessions or admin tables.
        return False if is_shard else None
