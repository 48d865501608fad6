"""``manage.py dropindex NAME``: drop a retired index's tables on every shard, once confirmed."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from schemaless_store import lifecycle, shards
from schemaless_store.exceptions import ConfigurationError


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
        conn = connections[alias]
        with shards.errors_named(alias), conn.cursor() as cursor:
            if name not in conn.introspection.table_names(cursor):
                parts.append(f"{alias} (no table)")
                continue
            cursor.execute(f"SELECT COUNT(*) FROM {conn.ops.quote_name(name)}")
            parts.append(f"{alias} ({cursor.fetchone()[0]} rows)")
    return ", ".join(parts)
