"""Sends the peer's model to the ``peer`` database; nothing of the bench app is migrated."""

from __future__ import annotations

from typing import Any


class PeerRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "peer" if model._meta.app_label == "benchapp" else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "peer" if model._meta.app_label == "benchapp" else None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        if db == "peer" or app_label == "benchapp":
            return False
        return None
