"""``manage.py loaddata``, Django's own, with fixtures of kinds loaded through the store.

A fixture whose objects are all kinds' (what ``dumpdata app.Kind`` writes) is loaded with
each kind's ``bulk_put()`` (:mod:`schemaless_store.kinds.fixtures`): validated, then written
to the shards with the index rows; an entity of the same id is replaced. A fixture mixing
kinds with table rows is refused; any other fixture is Django's ``loaddata`` unchanged.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import CommandError
from django.core.management.commands import loaddata

from schemaless_store.kinds import fixtures


class Command(loaddata.Command):
    help = loaddata.Command.help + " Fixtures of kinds are written to the shards."

    def load_label(self, fixture_label: str) -> None:
        found: list[tuple[str, Any] | None] = []
        for fixture_file, _fixture_dir, _name in self.find_fixtures(fixture_label):
            _, ser_fmt, cmp_fmt = self.parse_name(os.path.basename(fixture_file))
            if ser_fmt != "json":
                found.append(None)
                continue
            open_method, mode = self.compression_formats[cmp_fmt]  # type: ignore[misc]
            with open_method(fixture_file, mode) as fixture:
                text: Any = fixture.read()
            if isinstance(text, bytes):
                text = text.decode("utf-8")
            found.append((fixture_file, fixtures.kind_objects(text, fixture_file)))
        kinds: list[Any] = [f for f in found if f is not None and f[1] is not None]
        if not kinds:
            super().load_label(fixture_label)
            return
        if len(kinds) != len(found):
            raise CommandError(
                f"loaddata {fixture_label}: the name matches fixtures of kinds and others; "
                "give each file by its own name"
            )
        for fixture_file, objects in kinds:
            count = fixtures.load(objects, fixture_file)
            self.fixture_count += 1
            self.fixture_object_count += count
            self.loaded_object_count += count
            if self.verbosity >= 2:
                self.stdout.write(f"Installed {count} kind object(s) from {fixture_file}.")
