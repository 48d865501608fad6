"""``CONN_MAX_AGE`` of every alias set for a test, for the connections opened from then on
(the scatter threads' among them: the pool starts afresh before and after)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.db import connections

from schemaless_store.query.pool import reset_scatter_pool


@contextlib.contextmanager
def conn_max_age(value: int | None) -> Iterator[None]:
    saved = {alias: connections.settings[alias]["CONN_MAX_AGE"] for alias in connections}
    reset_scatter_pool()
    for alias in connections:
        connections.settings[alias]["CONN_MAX_AGE"] = value
    try:
        yield
    finally:
        reset_scatter_pool()
        for alias, old in saved.items():
            connections.settings[alias]["CONN_MAX_AGE"] = old
