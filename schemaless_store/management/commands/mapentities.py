"""``manage.py mapentities myapp.migrations_data.rename_link``: apply a function to every stored
entity, through the write protocol, while the site runs.

The run lives in :mod:`schemaless_store.mapping`; this command parses options, hands them over
by keyword and prints the summary (docs/usage.md, "Changing data that is already stored").
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from schemaless_store.exceptions import ConfigurationError, SchemalessError
from schemaless_store.kinds.kind import KINDS
from schemaless_store.kinds.options import stored_value
from schemaless_store.mapping import map_entities
from schemaless_store.values import jsonview

from ..arguments import add_walk_arguments, throttle_options
from ..progress import progress_stream


def condition(text: str) -> tuple[str, Any]:
    """``--where prop=value``: the value as JSON (with the admin's ``$`` forms) if it parses,
    else as text (``kind=post`` and ``kind="post"`` are the same)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"must be property=value, not {text!r}")
    try:
        return name, jsonview.from_json(jsonview.parse(value), name)
    except jsonview.JSONViewError:
        return name, value


def kind_conditions(kind: str, where: dict[str, Any]) -> dict[str, Any]:
    """``--where`` values given with ``--kind``, each converted by the kind's field as the kind
    stores it (as its admin search and API filters do): ``user_id=<hex>`` is a UUID, not text
    that no stored value equals. Names that are no declared field stay as parsed."""
    model = KINDS.get(kind)
    if model is None:
        return where  # map_entities says that no kind has the name
    converted = {}
    for name, value in where.items():
        field_name, _sep, lookup = name.partition("__")
        field = model._kind.fields.get(field_name)
        if field is not None:
            try:
                if lookup == "in" and isinstance(value, list):
                    value = [stored_value(field, field.to_python(item)) for item in value]
                else:
                    value = stored_value(field, field.to_python(value))
            except ValidationError as exc:
                raise CommandError(f"--where {name}: {' '.join(exc.messages)}") from None
        converted[name] = value
    return converted


class Command(BaseCommand):
    help = (
        "Apply a function (a dotted path) to every stored entity, or to those --where finds, "
        "and save the entities whose properties it changed, through the write protocol and "
        "only if nobody wrote them meanwhile. Resumes where an earlier run of the same "
        "function stopped."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("function", help="The function's dotted path, e.g. myapp.data.fix")
        parser.add_argument(
            "--where",
            action="append",
            type=condition,
            metavar="PROP=VALUE",
            help="Only the entities filter_index(prop=value, ...) finds; repeatable.",
        )
        parser.add_argument(
            "--kind",
            default=None,
            metavar="NAME",
            help="Only the entities of this kind (docs/kinds.md): the function gets instances "
            "of the kind's class, and --where uses the kind's indexes, its values converted by "
            "the kind's fields.",
        )
        add_walk_arguments(
            parser,
            dry_run="Write nothing: count what would change and show 3 examples (before/after).",
            restart=(
                "Forget an earlier run of this function (checkpoints, the entities it saved, "
                "its failures) and start over."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        verbosity = options["verbosity"]
        where = dict(options["where"] or [])
        if options["kind"] is not None and where:
            where = kind_conditions(options["kind"], where)
        try:
            summary = map_entities(
                options["function"],
                where=where or None,
                kind=options["kind"],
                shards=options["shards"],
                batch_size=options["batch_size"],
                **throttle_options(options),
                dry_run=options["dry_run"],
                restart=options["restart"],
                progress=verbosity >= 1 and self.stderr.isatty(),
                progress_file=progress_stream(self),
            )
        except (ConfigurationError, ValueError, SchemalessError) as exc:
            raise CommandError(str(exc)) from exc
        for example in summary.examples:
            self.stdout.write(f"entity {example.entity_id}")
            self.stdout.write(f"  before: {example.before}")
            self.stdout.write(f"  after:  {example.after}")
        if verbosity >= 1:
            style = self.style.SUCCESS if summary.ok else self.style.WARNING
            self.stdout.write(style(summary.describe()))
        for entity_id, message in summary.failures:
            self.stderr.write(f"failed: {entity_id}: {message}")
        if summary.failed > len(summary.failures):
            self.stderr.write(f"... and {summary.failed - len(summary.failures)} more")
        if not summary.ok:
            reasons = list(summary.problems)
            if summary.failed:
                reasons.append(
                    f"{summary.failed} entities failed (recorded: run the command again to "
                    "retry only those)"
                )
            interrupted = [a for a, s in summary.shards.items() if s == "interrupted"]
            if interrupted:
                reasons.append(f"interrupted on {', '.join(interrupted)}: run it again to resume")
            raise CommandError("; ".join(reasons))
