"""``manage.py dumpdata``, Django's own, with a word about entities and cells.

Entities and cells live on the shards, never on ``default``: Django's ``dumpdata
schemaless_store.Entity`` reads ``default``, finds that the router keeps the model off it and
prints ``[]``, which looks like an empty store. With ``--database=shard_0`` it prints one
shard's raw rows (MessagePack bodies, ``added_id`` keys), which no other store reads and which
``loaddata`` cannot restore (index rows, the shard that owns each id). This command refuses
the first, warns about the second, and otherwise is Django's ``dumpdata`` unchanged (as
``django.contrib.staticfiles`` extends ``runserver``). Backups: ``exportentities``.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError
from django.core.management.commands import dumpdata

from schemaless_store.kinds import fixtures
from schemaless_store.topology import shards

APP = "schemaless_store"
SHARD_MODELS = ("entity", "cell", "cellhead")
# Follows "To " or "to ": one sentence.
ADVICE = (
    "back the store up, use `manage.py exportentities`; to restore it, "
    "`manage.py importentities` (docs/backup.md)"
)


class Command(dumpdata.Command):
    help = dumpdata.Command.help + (
        " Entities and cells (on the shards) are not dumped: use exportentities."
    )

    def handle(self, *app_labels: str, **options: Any) -> None:
        if app_labels and self._dump_kinds(app_labels, options):
            return
        named = [
            label
            for label in app_labels
            if label.lower() in {f"{APP}.{name}" for name in SHARD_MODELS}
        ]
        on_shard = options["database"] in shards.shard_aliases()
        if named and not on_shard:
            raise CommandError(
                f"{', '.join(named)} live on the shards, not in '{options['database']}': "
                f"dumpdata would print no entity at all. To {ADVICE}."
            )
        if named:
            self.stderr.write(
                f"dumpdata --database={options['database']}: these are one shard's raw rows "
                "(MessagePack bodies, added_id keys); loaddata cannot restore them with their "
                f"index rows, nor onto other shards. To {ADVICE}.",
                style_func=self.style.WARNING,
            )
        elif not on_shard and (not app_labels or APP in app_labels):
            self.stderr.write(
                f"dumpdata: entities and cells live on the shards and are not in this dump "
                "(nor are kinds: name them, `dumpdata app.Kind`); "
                f"to {ADVICE}.",
                style_func=self.style.WARNING,
            )
        super().handle(*app_labels, **options)

    def _dump_kinds(self, app_labels: tuple[str, ...], options: dict[str, Any]) -> bool:
        """Dump the kinds the labels name, if they name kinds (docs/kinds.md#fixtures):
        True if it did. Labels naming kinds and tables together are refused."""
        labels = [label for label in app_labels if not label.lower().startswith(APP + ".")]
        kinds = fixtures.kinds_of(labels)
        if not kinds:
            return False
        others = [
            label
            for label, models in fixtures.requested_models(labels)
            if not any(fixtures.is_kind(m) for m in models)
        ]
        if others or len(labels) != len(app_labels):
            raise CommandError(
                f"dumpdata: {', '.join(k._meta.label for k in kinds)} are kinds, whose entities "
                f"live on the shards; dump them apart from {', '.join(others or app_labels)}"
            )
        if options["format"] != "json":
            raise CommandError(
                f"dumpdata of kinds writes JSON (their entities' typed JSON view), not "
                f"{options['format']!r}: leave out --format"
            )
        text = json.dumps(fixtures.dump(kinds), indent=options["indent"], ensure_ascii=False)
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8") as out:
                out.write(text + "\n")
        else:
            self.stdout.write(text)
        return True
