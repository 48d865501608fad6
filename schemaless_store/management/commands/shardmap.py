"""``manage.py shardmap``: the bucket -> shard map in force, and what each shard holds.
``--id UUID``: where one entity lives (its bucket, owner, server, and any move under way).

For each shard: its bucket ranges in the stored map, its entities and index rows, and what its
own bucket table says (the authority on what it serves). A shard whose table disagrees with the
map is named: writes to those buckets are refused there until it is fixed (docs/resharding.md).
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from schemaless_store.config.indexes import registry
from schemaless_store.config.metadata import BucketMove
from schemaless_store.exceptions import ShardUnavailable
from schemaless_store.moves.locate import locate
from schemaless_store.moves.record import describe
from schemaless_store.tables import buckets as bucket_table
from schemaless_store.tables.counts import count_tables
from schemaless_store.topology import bucket_map, shards


class Command(BaseCommand):
    help = (
        "Show the bucket -> shard map in force (its stored version), and per shard its "
        "buckets, entities, index rows and what its own bucket table serves."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--id",
            dest="entity_id",
            help="An entity id: print its bucket, the shard that owns it, that shard's server "
            "and whether a move is under way for it.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["entity_id"]:
            try:
                entity_id = uuid.UUID(options["entity_id"].strip())
            except ValueError:
                raise CommandError(f"--id {options['entity_id']!r} is not a UUID") from None
            for line in locate(entity_id).lines():
                self.stdout.write(line)
            return
        found = bucket_map.refresh()
        if found.version:
            self.stdout.write(f"Shard map version {found.version}, {found.buckets} buckets.")
        else:
            self.stdout.write(
                f"No shard map is stored yet (run migrateall): SCHEMALESS['SHARDS'] is in force, "
                f"{found.buckets} buckets."
            )
        if found.moving:
            self.stdout.write(f"Moving now: buckets {bucket_map.describe(found.moving)}.")
        for move in BucketMove.objects.exclude(phase__in=BucketMove.FINISHED).order_by("pk"):
            record = describe(move)
            self.stdout.write(
                f"Move #{move.pk} in progress: buckets {record.buckets} to {move.target}, "
                f"{move.phase} (started {record.started_text}; {record.copied_text} copied, "
                f"{record.replayed:,} changes replayed)."
            )
        tables = ["entities", *(index.name for index in registry.valid())]
        for alias in shards.shard_aliases():
            mapped = found.buckets_of(alias)
            self.stdout.write(
                self.style.MIGRATE_HEADING(
                    f"{alias}: {len(mapped)} buckets ({bucket_map.describe(mapped)})"
                )
            )
            counts = count_tables(alias, tables)
            entities = counts["entities"].text
            index_rows = sum(c.rows or 0 for name, c in counts.items() if name != "entities")
            self.stdout.write(f"  entities: {entities}; index rows: {index_rows:,}")
            self._served(alias, mapped)

    def _served(self, alias: str, mapped: list[int]) -> None:
        try:
            states = bucket_table.states(alias)
        except ShardUnavailable as exc:
            self.stdout.write(self.style.ERROR(f"  bucket table: {exc}"))
            return
        except Exception as exc:
            self.stdout.write(self.style.ERROR(f"  bucket table: cannot be read ({exc})"))
            return
        by_state: dict[int, list[int]] = {}
        for number, state in sorted(states.items()):
            by_state.setdefault(state, []).append(number)
        for state, numbers in sorted(by_state.items()):
            name = bucket_table.NAMES.get(state, f"state {state}")
            self.stdout.write(f"  {name} here: {len(numbers)} ({bucket_map.describe(numbers)})")
        served = {n for n, s in states.items() if s in bucket_table.SERVING}
        missing = sorted(set(mapped) - served)
        if missing:
            self.stdout.write(
                self.style.WARNING(
                    f"  the map gives it {len(missing)} buckets its table does not serve "
                    f"({bucket_map.describe(missing)}): writes to them are refused here "
                    "(run migrateall if no move is under way)"
                )
            )
