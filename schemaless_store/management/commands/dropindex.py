"""``manage.py dropindex NAME``: drop a retired index's tables on every shard, once confirmed."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from schemaless_store.exceptions import ConfigurationError
from schemaless_store.tables import lifecycle
from schemaless_store.tables.counts import exact_count
from schemaless_store.topology import shards


class Command(BaseCommand):
    help = (
        "Drop the tables of retired indexes (no longer declared, marked retired by migrate) on "
        "every shard, and forget them. Refuses an index that is still declared."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("names", nargs="+", metavar="NAME", help="Index table name(s).")
        parser.add_argument(
            "--noinput",
            "--no-input",
            action="store_false",
            dest="interactive",
            help="Do not ask for confirmation (for scripts).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        names = tuple(dict.fromkeys(options["names"]))
        for name in names:
            try:
                lifecycle.check_droppable(name)
            except ConfigurationError as exc:
                raise CommandError(str(exc)) from exc
        if options["interactive"]:
            lines = [f"  {name}: {_describe_tables(name)}" for name in names]
            answer = input(
                "This drops these index tables on every shard; it cannot be undone:\n"
                + "\n".join(lines)
                + "\nType 'yes' to continue, or 'no' to cancel: "
            )
            if answer.strip().lower() != "yes":
                self.stdout.write("Drop cancelled; nothing was changed.")
                return
        for name in names:
            try:
                aliases = lifecycle.drop_retired(name)
            except ConfigurationError as exc:  # declared again meanwhile
                raise CommandError(str(exc)) from exc
            if options["verbosity"] >= 1:
                self.stdout.write(
                    self.style.SUCCESS(f"Dropped index {name} on {', '.join(aliases)}.")
                )


def _describe_tables(name: str) -> str:
    parts = []
    for alias in shards.shard_aliases():
        rows = exact_count(alias, name)
        parts.append(f"{alias} (no table)" if rows is None else f"{alias} ({rows} rows)")
    return ", ".join(parts)
