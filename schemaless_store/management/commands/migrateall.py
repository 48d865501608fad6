"""``manage.py migrateall``: ``migrate`` on ``default`` and then on every shard alias."""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

from schemaless_store import conf


class Command(BaseCommand):
    help = "Run migrate on the metadata database and on every shard (creates index tables too)."

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        for alias in ("default", *conf.get().shards):
            if verbosity:
                self.stdout.write(self.style.MIGRATE_HEADING(f"Migrating {alias}"))
            call_command(
                "migrate",
                database=alias,
                verbosity=max(0, verbosity - 1),
                interactive=False,
                stdout=self.stdout,
                stderr=self.stderr,
            )
        if verbosity:
            self.stdout.write(
                self.style.SUCCESS(f"Migrated default and {len(conf.get().shards)} shards.")
            )
