"""``manage.py migrateall``: ``migrate`` on ``default`` and then on every shard alias, after the
system checks of all of them (a server the store cannot use stops it before anything changes).

Then it says what became of the declared indexes: which tables it created (or found already
there) on the shards, the state each index is in now (``lifecycle.states()``), and, for each
index still ``building`` (new on a store that already has entities), the ``runcleaner`` command
that backfills it. Retired indexes are listed with their ``dropindex`` command. See
``docs/cleaner.md``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

from schemaless_store.config import conf
from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import ConfigurationError
from schemaless_store.tables import lifecycle
from schemaless_store.topology import shards


class Command(BaseCommand):
    help = (
        "Run migrate on the metadata database and on every shard (creates index tables too), "
        "then show each declared index's tables and state, and how to backfill the building ones."
    )

    def get_check_kwargs(self, options: Any) -> Any:
        """The system checks run for every database it migrates (as ``migrate`` runs them for
        its one), before any is touched: a server the store cannot use stops it here
        (docs/checks.md)."""
        try:
            aliases = ["default", *conf.get().shards]
        except ConfigurationError:
            aliases = ["default"]  # schemaless.E001 says what is wrong
        databases = [alias for alias in aliases if alias in settings.DATABASES]
        return {**super().get_check_kwargs(options), "databases": databases}

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        aliases = tuple(conf.get().shards)
        # Which index tables exist before: what migrate then creates is new.
        before = {alias: _tables(alias) for alias in aliases} if verbosity else {}
        for alias in ("default", *aliases):
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
            self.stdout.write(self.style.SUCCESS(f"Migrated default and {len(aliases)} shards."))
            self._report_indexes(aliases, before)

    def _report_indexes(self, aliases: tuple[str, ...], before: dict[str, set[str]]) -> None:
        after = {alias: _tables(alias) for alias in aliases}
        states = lifecycle.states(refresh=True)
        declared = registry.valid()
        shown_shards = ", ".join(aliases)
        if not declared:
            self.stdout.write(f"No index is declared: no index tables on {shown_shards}.")
        else:
            self.stdout.write(
                self.style.MIGRATE_HEADING(f"Indexes: their tables on {shown_shards}; their state")
            )
            width = max(len(index.name) for index in declared)
            for index in sorted(declared, key=lambda i: i.name):
                state = states.get(index.name)
                shown_state = state or "no state (is default migrated?)"
                if state == lifecycle.BUILDING:
                    shown_state = self.style.WARNING(state)
                self.stdout.write(
                    f"  {index.name:<{width}}  {_tables_done(index.name, before, after)}; "
                    f"{shown_state}"
                )
        for index in registry.all():
            if index.errors:
                self.stdout.write(
                    self.style.WARNING(
                        f"  {index.name}: not created, the declaration is invalid "
                        "(manage.py check says why)"
                    )
                )
        building = sorted(i.name for i in declared if states.get(i.name) == lifecycle.BUILDING)
        if building:
            self.stdout.write(
                self.style.WARNING(
                    "A building index is new on a store that already holds data: queries use it "
                    "only once the cleaner has backfilled it. Once every process that writes "
                    "entities runs the code that declares it, run:"
                )
            )
            for name in building:
                self.stdout.write(f"  manage.py runcleaner --index={name} --once")
        retired = sorted(n for n, s in states.items() if s == lifecycle.RETIRED)
        if retired:
            self.stdout.write(
                f"Retired (no longer declared; their tables stay until dropped, once no process "
                f"with the old declaration is left): {', '.join(retired)}"
            )
            for name in retired:
                self.stdout.write(f"  manage.py dropindex {name}")


def _tables(alias: str) -> set[str]:
    """The names of the tables on a shard (Django's introspection)."""
    with shards.errors_named(alias):
        return set(connections[alias].introspection.table_names())


def _tables_done(name: str, before: dict[str, set[str]], after: dict[str, set[str]]) -> str:
    created = [alias for alias in after if name in after[alias] and name not in before[alias]]
    found = [alias for alias in after if name in before[alias]]
    missing = [alias for alias in after if name not in after[alias]]
    parts = []
    if created:
        parts.append(
            "created" + ("" if len(created) == len(after) else f" on {', '.join(created)}")
        )
    if found:
        parts.append("found" + ("" if len(found) == len(after) else f" on {', '.join(found)}"))
    if missing:
        parts.append(f"missing on {', '.join(missing)}")
    return ", ".join(parts)
