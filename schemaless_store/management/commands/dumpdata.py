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

from typing import Any

from django.core.management.base import CommandError
from django.core.management.commands import dumpdata

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
                f"dumpdata: entities and cells live on the shards and are not in this dump; "
                f"to {ADVICE}.",
                style_func=self.style.WARNING,
            )
        super().handle(*app_labels, **options)
