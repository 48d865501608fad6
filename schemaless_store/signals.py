"""The store's receivers, connected in ``AppConfig.ready()``: ``post_migrate`` creates index
tables, the bucket table and the receipts table on shards and records index states on ``default``;
``connection_created`` refuses a server the store does not run on (:mod:`.config.server_support`).

Index maintenance is not a receiver: every write runs the write protocol
(:mod:`.writes.protocol`), which sends Django's ``pre_save``/``post_save`` and
``pre_delete``/``post_delete`` around an entity's row itself, so other receivers still hear
every save and delete.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import DEFAULT_DB_ALIAS
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate

from .config import conf, server_support
from .tables import buckets, lifecycle, receipts
from .tables.ddl import create_tables
from .topology import bucket_map


def _after_migrate(sender: Any, using: str, **kwargs: Any) -> None:
    if using in conf.get().shards:
        create_tables(using)
        receipts.create_table(using)  # the write receipts (docs/design.md#receipts)
        # The shard's own bucket table, given the buckets the map in force gives it (a bucket
        # that has a row already, one that moved away for one, keeps it).
        buckets.create(using, bucket_map.refresh().buckets_of(using))
        lifecycle.promote_if_empty()
    else:
        lifecycle.sync_states(using)
        if using == DEFAULT_DB_ALIAS:
            bucket_map.store_seed(using)  # from the first migrate on, the stored map is in force


def connect() -> None:
    """Connect the receivers (idempotent: each has a dispatch_uid)."""
    connection_created.connect(
        server_support.refuse_unsupported, dispatch_uid="schemaless_refuse_unsupported"
    )
    post_migrate.connect(
        _after_migrate,
        sender=apps.get_app_config("schemaless_store"),
        dispatch_uid="schemaless_after_migrate",
    )
