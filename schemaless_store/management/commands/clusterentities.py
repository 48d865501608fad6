"""``manage.py clusterentities``: cluster the shards' ``entities`` by ``id``, online
(docs/design.md#the-entities-table, docs/upgrading.md#clustering-entities-by-id)."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from schemaless_store.config import conf
from schemaless_store.sql import dialects, layout
from schemaless_store.tables import clustering
from schemaless_store.topology import servers


class Command(BaseCommand):
    help = (
        "Cluster the entities table of MariaDB shards by id (PRIMARY KEY (id)), with one "
        "online ALTER per shard (ALGORITHM=INPLACE, LOCK=NONE): reads and writes go on while "
        "the table is rebuilt. Shards already clustered by id are left alone."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--database",
            action="append",
            dest="aliases",
            metavar="ALIAS",
            help="A shard to convert (repeatable; default: every shard).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be converted; change nothing."
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=5.0,
            help="Seconds the ALTER waits for the table's metadata lock before it gives up and "
            "tries again (default 5): writers queue behind a waiting ALTER.",
        )
        parser.add_argument(
            "--galera",
            action="store_true",
            help="Convert a Galera shard too: there the ALTER runs in total order and blocks "
            "the cluster's writes to entities while it runs (move its buckets instead).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        aliases = options["aliases"] or list(conf.get().shards)
        unknown = [a for a in aliases if a not in conf.get().shards]
        if unknown:
            raise CommandError(f"not a shard: {', '.join(unknown)}")
        # Every shard is looked at before any is converted: a refusal changes nothing.
        todo: list[tuple[str, str]] = []
        for alias in aliases:
            conn = connections[alias]
            if not dialects.of(conn).relayout:
                self.stdout.write(f"{alias}: {conn.vendor}, which keeps its one layout.")
                continue
            clustered_by = layout.clustered_by(conn)
            if clustered_by is None:
                raise CommandError(f"{alias} has no entities table: run migrate first")
            if clustered_by != layout.SEED:
                self.stdout.write(f"{alias}: entities is clustered by {clustered_by} already.")
                continue
            if servers.is_galera(alias) and not options["galera"]:
                raise CommandError(
                    f"{alias} is a Galera node, where the ALTER would block every node's writes "
                    "to entities while it runs: move its buckets to a shard clustered by id "
                    "(movebuckets), or give --galera to accept the pause; nothing was converted"
                )
            rows = layout.rows_up_to(conn, clustering.AT_MIGRATE_MAX_ROWS)
            todo.append(
                (
                    alias,
                    f"{rows:,} rows" if rows <= clustering.AT_MIGRATE_MAX_ROWS else "a big table",
                )
            )
        for alias, size in todo:
            if options["dry_run"]:
                self.stdout.write(f"{alias}: would cluster entities by id ({size}).")
                continue
            self.stdout.write(f"{alias}: clustering entities by id ({size}), online...")
            try:
                took = clustering.cluster(alias, wait=options["wait"], say=self.stdout.write)
            except DatabaseError as exc:
                raise CommandError(f"{alias}: {exc}") from exc
            self.stdout.write(
                self.style.SUCCESS(f"{alias}: entities clustered by id in {took or 0:.1f} s.")
            )
