"""``manage.py importentities``: entities from a JSON Lines file (an export, or another tool's),
or from the rows of a Django model, written through the store's write path.

The work is :class:`schemaless_store.backup.importer.Importer`'s; this command parses options,
chooses the source (:class:`~schemaless_store.backup.jsonfile.JsonLinesFile` or
:class:`~schemaless_store.backup.frommodel.ModelRows`), and reports. See ``docs/backup.md``.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.apps import apps
from django.core.management.base import BaseCommand, CommandError

from schemaless_store.backup.frommodel import ModelRows
from schemaless_store.backup.importer import DEFAULT_BATCH, Importer
from schemaless_store.backup.items import Source
from schemaless_store.backup.jsonfile import JsonLinesFile
from schemaless_store.exceptions import SchemalessError
from schemaless_store.models import Cell, Entity

from ..arguments import os_error, whole_number
from ..progress import progress_stream


def names(text: str) -> list[str]:
    found = [name.strip() for name in text.split(",") if name.strip()]
    if not found:
        raise argparse.ArgumentTypeError(f"expected field names separated by commas, not {text!r}")
    return found


def readable(path: str) -> None:
    """Refuse a file that cannot be read before anything starts (nothing to resume then)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise CommandError(f"cannot read {os_error(exc)}; nothing was imported") from exc


class Command(BaseCommand):
    help = (
        "Import entities from a JSON Lines file (exportentities' format) or from the rows of a "
        "Django model (--from-model), through bulk_put: index rows maintained, each entity on "
        "the shard that owns it now. Rerunning is safe and resumes an interrupted import."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "file", nargs="?", metavar="FILE", help="A JSON Lines file; - reads standard input."
        )
        parser.add_argument(
            "--from-model",
            metavar="APP.MODEL",
            help="Import the rows of this Django model instead of a file.",
        )
        parser.add_argument(
            "--id-field",
            metavar="FIELD",
            help="With --from-model: the field holding each entity's id (a UUID). Default: a "
            "stable uuid5 of the row's primary key (docs/backup.md).",
        )
        parser.add_argument(
            "--json-field",
            metavar="FIELD",
            help="With --from-model: a JSONField whose keys become the entity's properties.",
        )
        parser.add_argument(
            "--fields",
            type=names,
            default=[],
            metavar="A,B,C",
            help="With --from-model: columns that become properties of the same names.",
        )
        parser.add_argument(
            "--batch-size",
            type=whole_number,
            default=DEFAULT_BATCH,
            help=f"Lines or rows checked and written together (default {DEFAULT_BATCH}).",
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="Stop at the first bad line or row; nothing of its batch is written.",
        )
        parser.add_argument(
            "--rejects",
            metavar="FILE",
            help="Where bad lines or rows go, as JSON Lines (default: FILE.rejects.jsonl, or "
            "APP.MODEL.rejects.jsonl); replaced on each run, written only if there are some.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source, rejects = self._source(options)
        importer = Importer(
            Entity,
            cell_model=Cell,
            batch_size=options["batch_size"],
            strict=options["strict"],
            rejects=None if options["strict"] else rejects,
            progress=options["verbosity"] >= 1 and self.stderr.isatty(),
            progress_file=progress_stream(self),
        )
        try:
            summary = importer.run(source)
        except (SchemalessError, OSError) as exc:
            problem = os_error(exc) if isinstance(exc, OSError) else str(exc)
            raise CommandError(
                f"{problem}. What was imported before it stays; rerun the same command to go "
                "on (what is stored already is not written again)."
            ) from exc
        verbosity = options["verbosity"]
        if verbosity >= 1:
            for rejected in summary.shown:
                self.stderr.write(rejected.describe(), style_func=self.style.WARNING)
            if summary.more_rejected > 0:
                self.stderr.write(
                    f"... and {summary.more_rejected:,} more rejected "
                    f"(all in {summary.rejects_path})",
                    style_func=self.style.WARNING,
                )
            for warning in summary.warnings():
                self.stderr.write(warning, style_func=self.style.WARNING)
            healthy = not (summary.failed or summary.rejected)
            style = self.style.SUCCESS if healthy else self.style.WARNING
            self.stdout.write(summary.describe(), style_func=style)
        if summary.stopped is not None:
            raise CommandError(f"--strict: {summary.stop_reason()}")
        if summary.interrupted:
            raise CommandError("interrupted; rerun the same command to resume")
        if summary.rejected:
            where = f" (see {summary.rejects_path})" if summary.rejects_path else ""
            raise CommandError(
                f"{summary.rejected:,} {'item was' if summary.rejected == 1 else 'items were'} "
                f"rejected{where}; the others were imported"
            )

    def _source(self, options: dict[str, Any]) -> tuple[Source, str]:
        path, label = options["file"], options["from_model"]
        if bool(path) == bool(label):
            raise CommandError("give a FILE to import, or --from-model APP.MODEL (not both)")
        model_options = [o for o in ("id_field", "json_field", "fields") if options[o]]
        if path:
            if model_options:
                flags = ", ".join("--" + o.replace("_", "-") for o in model_options)
                verb = "goes" if len(model_options) == 1 else "go"
                raise CommandError(f"{flags} {verb} with --from-model, not with a file")
            if path != "-":
                readable(path)
            rejects = options["rejects"] or (
                "importentities.rejects.jsonl" if path == "-" else f"{path}.rejects.jsonl"
            )
            return JsonLinesFile(path), rejects
        try:
            model = apps.get_model(label)
        except (LookupError, ValueError) as exc:
            raise CommandError(f"--from-model {label}: {exc}") from exc
        try:
            source = ModelRows(
                model,
                id_field=options["id_field"],
                json_field=options["json_field"],
                fields=options["fields"],
                chunk_size=options["batch_size"],
            )
        except SchemalessError as exc:
            raise CommandError(f"--from-model {label}: {exc}") from exc
        return source, options["rejects"] or f"{model._meta.label}.rejects.jsonl"
