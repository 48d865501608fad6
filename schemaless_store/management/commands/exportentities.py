"""``manage.py exportentities``: every entity (and with ``--cells`` every cell) as JSON Lines.

The work is :class:`schemaless_store.backup.export.Exporter`'s; this command parses options,
opens the output and prints the summary. A file is written as ``FILE.partial`` and renamed to
``FILE`` once the export is complete, so a failed export never replaces a good one. See
``docs/backup.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
from collections.abc import Iterator
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from schemaless_store.backup.export import DEFAULT_CHUNK, Exporter
from schemaless_store.exceptions import SchemalessError

from ..arguments import shard_alias, whole_number
from ..progress import UnstyledStream, progress_stream


def moment(text: str) -> dt.datetime:
    """An ISO 8601 date and time (``2026-01-31T12:00:00+00:00``) or date; without a UTC
    offset, in the current time zone (``TIME_ZONE``)."""
    try:
        value = parse_datetime(text)
        if value is None:
            day = parse_date(text)
            value = None if day is None else dt.datetime.combine(day, dt.time())
    except ValueError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(
            f"must be an ISO 8601 date and time, e.g. 2026-01-31T12:00:00+00:00, not {text!r}"
        )
    return timezone.make_aware(value) if timezone.is_naive(value) else value


class Command(BaseCommand):
    help = (
        "Export every entity (or one shard's, or those updated since a time) as JSON Lines: "
        "one object per line with id, updated and the properties in the admin's reversible "
        "JSON form. Restore with importentities, onto any set of shards."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--output",
            "-o",
            default="-",
            metavar="FILE",
            help="Write to FILE (via FILE.partial, renamed when complete); default: stdout.",
        )
        parser.add_argument(
            "--shard",
            action="append",
            dest="shards",
            type=shard_alias,
            metavar="ALIAS",
            help="Only this shard (database alias); repeatable. Default: every shard.",
        )
        parser.add_argument(
            "--since",
            type=moment,
            metavar="DATETIME",
            help="Only entities whose row was written at or after this time (ISO 8601; "
            "without an offset, in TIME_ZONE). Deletions are not exported.",
        )
        parser.add_argument(
            "--cells",
            action="store_true",
            help="Also export every cell version (the cell store, and entity history).",
        )
        parser.add_argument(
            "--chunk-size",
            type=whole_number,
            default=DEFAULT_CHUNK,
            help=f"Rows read per query (default {DEFAULT_CHUNK}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["output"]
        try:
            exporter = Exporter(
                shards=options["shards"],
                since=options["since"],
                cells=options["cells"],
                chunk_size=options["chunk_size"],
                progress=options["verbosity"] >= 1 and self.stderr.isatty(),
                progress_file=progress_stream(self),
            )
            with _output(path, self.stdout) as out:
                summary = exporter.run(out)
        except OSError as exc:
            problem = exc.strerror or str(exc)
            raise CommandError(f"cannot write {path}: {problem}; nothing was exported") from exc
        except (SchemalessError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        # The lines went to stdout: the summary goes to stderr, out of the data's way.
        report = self.stderr if path == "-" else self.stdout
        if options["verbosity"] >= 1:
            style = (
                self.style.WARNING if summary.corrupt or summary.not_owned else self.style.SUCCESS
            )
            report.write(summary.describe(), style_func=style)
        if summary.corrupt:
            raise CommandError(
                f"{summary.corrupt} entities could not be decoded and are not in the export "
                "(the admin shows them; docs/usage.md, CorruptBody)"
            )


@contextlib.contextmanager
def _output(path: str, stdout: Any) -> Iterator[TextIO]:
    if path == "-":
        # Through the command's stdout as it is (OutputWrapper would end each write with a
        # newline), so that call_command(stdout=...) gets the lines too.
        yield UnstyledStream(stdout)  # type: ignore[misc]
        return
    partial = f"{path}.partial"
    try:
        with open(partial, "w", encoding="utf-8", newline="\n", buffering=1 << 20) as out:
            yield out
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    os.replace(partial, path)
