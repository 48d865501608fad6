"""Exporting the store as JSON Lines (the format is :mod:`.lines`).

Shard after shard, in the order of ``SCHEMALESS["SHARDS"]``: the shard's entities in
``added_id`` order, read in chunks by keyset (memory stays flat at any size), then, with
``cells``, its cells in ``added_at`` order. On MariaDB each shard is read inside one
consistent snapshot (:func:`~schemaless_store.topology.shards.snapshot`), so a shard's
lines are that shard as of one instant; different shards are read at different instants
(docs/backup.md).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from django.utils import timezone
from tqdm import tqdm

from ..config.indexes import ENTITIES
from ..exceptions import CorruptBody
from ..sql.values import datetime_converter
from ..tables import cells as cell_table
from ..tables import entities as entity_table
from ..topology import bucket_map, shards
from ..topology.shards import resolve_aliases
from ..values import bounds
from ..values.codec import decode_body
from . import lines

DEFAULT_CHUNK = 2000
# Ids of undecodable entities named in the summary (all are counted).
NAMED_CORRUPT = 10


@dataclass
class ExportSummary:
    shards: list[str]
    started: dt.datetime
    entities: int = 0
    cells: int = 0
    corrupt: int = 0
    corrupt_ids: list[str] = field(default_factory=list)
    not_owned: int = 0
    seconds: float = 0.0

    def describe(self) -> str:
        rate = self.entities / self.seconds if self.seconds else 0.0
        cells = f" and {self.cells:,} cell{'s' if self.cells != 1 else ''}" if self.cells else ""
        entities = "entity" if self.entities == 1 else "entities"
        text = (
            f"exported {self.entities:,} {entities}{cells} from {len(self.shards)} shard"
            f"{'s' if len(self.shards) != 1 else ''} in {self.seconds:.1f} s "
            f"({rate:,.0f} entities/s); started {self.started.isoformat()}"
        )
        if self.corrupt:
            text += (
                f"; {self.corrupt:,} entities with undecodable bodies are NOT in the export "
                f"(e.g. {', '.join(self.corrupt_ids)})"
            )
        if self.not_owned:
            text += (
                f"; skipped {self.not_owned:,} copies on a shard that no longer owns their "
                "bucket (left by a change of SCHEMALESS['SHARDS']; reads ignore them too)"
            )
        return text


class Exporter:
    """Writes every entity (of ``shards``, updated at or after ``since``; and with ``cells``
    every cell) to a text stream as JSON Lines; :meth:`run` returns an :class:`ExportSummary`.

    ``progress`` draws a tqdm bar on ``progress_file`` (default stderr).
    """

    def __init__(
        self,
        *,
        shards: Sequence[str] | None = None,
        since: dt.datetime | None = None,
        cells: bool = False,
        chunk_size: int = DEFAULT_CHUNK,
        progress: bool = False,
        progress_file: TextIO | None = None,
    ) -> None:
        if not bounds.whole(chunk_size):
            raise ValueError(f"chunk_size must be a whole number of at least 1, not {chunk_size!r}")
        if since is not None and timezone.is_naive(since):
            raise ValueError(f"since must be an aware datetime, not {since!r}")
        self.aliases = resolve_aliases(shards)
        self.since = since
        self.cells = cells
        self.chunk_size = chunk_size
        self.progress = progress
        self.progress_file = progress_file

    def run(self, out: TextIO) -> ExportSummary:
        clock = time.monotonic()
        summary = ExportSummary(shards=self.aliases, started=timezone.now())
        out.write(lines.header(summary.started, self.aliases, self.since, self.cells))
        with self._bar() as bar:
            for alias in self.aliases:
                with shards.snapshot(alias):
                    self._entities(alias, out, summary, bar)
                    if self.cells:
                        self._cells(alias, out, summary, bar)
        out.write(lines.end(summary.entities, summary.cells))
        out.flush()
        summary.seconds = time.monotonic() - clock
        return summary

    def _bar(self) -> tqdm:
        total = None
        if self.progress:
            total = sum(
                entity_table.count(ENTITIES, alias, since=self.since)
                + (cell_table.count(alias, self.since) if self.cells else 0)
                for alias in self.aliases
            )
        return tqdm(
            total=total,
            desc="export",
            unit=" lines",
            disable=not self.progress,
            file=self.progress_file,
            dynamic_ncols=True,
            mininterval=0.5,
        )

    def _entities(self, alias: str, out: TextIO, summary: ExportSummary, bar: tqdm) -> None:
        convert = datetime_converter(shards.connection(alias))
        entity_line = lines.entity
        after = 0
        while True:
            with shards.errors_named(alias):
                rows = entity_table.in_key_order(alias, after, self.chunk_size, self.since)
            if not rows:
                return
            text = []
            for _added_id, key, updated, body in rows:
                if bucket_map.alias_for(bytes(key)) != alias:
                    summary.not_owned += 1
                    continue
                properties = _decoded(bytes(body), summary, key)
                if properties is not None:
                    text.append(entity_line(bytes(key), convert(updated), properties))
            out.write("".join(text))
            summary.entities += len(text)
            bar.update(len(rows))
            after = rows[-1][0]

    def _cells(self, alias: str, out: TextIO, summary: ExportSummary, bar: tqdm) -> None:
        convert = datetime_converter(shards.connection(alias))
        after = 0
        while True:
            with shards.errors_named(alias):
                rows = cell_table.appended_after(alias, after, self.chunk_size, self.since)
            if not rows:
                return
            text = []
            for _added_at, key, column, ref_key, body, created in rows:
                if bucket_map.alias_for(bytes(key)) != alias:
                    summary.not_owned += 1
                    continue
                properties = None if body is None else _decoded(bytes(body), summary, key)
                if body is not None and properties is None:
                    continue
                text.append(lines.cell(bytes(key), column, ref_key, convert(created), properties))
            out.write("".join(text))
            summary.cells += len(text)
            bar.update(len(rows))
            after = rows[-1][0]


def _decoded(body: bytes, summary: ExportSummary, key: Any) -> dict[str, Any] | None:
    try:
        return decode_body(body)
    except CorruptBody:
        summary.corrupt += 1
        if len(summary.corrupt_ids) < NAMED_CORRUPT:
            summary.corrupt_ids.append(bytes(key).hex())
        return None
