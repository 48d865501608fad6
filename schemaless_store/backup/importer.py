"""Importing entities and cells through the store's write path, batch after batch.

Each batch of items (``batch_size`` lines of a file or rows of a model) is checked first
(:mod:`.batch_checks`): every item is parsed, turned into an entity, encoded and its index rows
computed, and the values it claims in unique indexes are looked up. Only then is the batch
written, with ``bulk_put``'s own code (:func:`~schemaless_store.writes.entity_writes.put_prepared`):
index rows maintained, each entity on the shard that owns its id under the settings in force
now. The next batch is read and checked on a thread of its own while this one is written
(reading and encoding overlap the round trips to the servers).

- **Bad items** (invalid JSON, an unknown ``$`` tag, a value the codec or an index column
  refuses, a unique value another entity holds) are reported with where they came from and
  why. ``strict``: the first one stops the import and nothing of its batch is written;
  otherwise they go to the reject file and the rest is imported.
- **Rerunning is safe**: ids come from the input, so a rerun writes the same entities; an
  entity already stored with the same body is not written again (no new ``updated``, no new
  history version). An interrupted import resumes by running it again: what is done costs a
  read, what is missing is written.
- With ``SCHEMALESS["HISTORY"]`` on, entities are written with a history version, except
  from an export that carries the history itself (``--cells``): then the versions are
  restored as they were (:func:`~schemaless_store.cells.store.restore_history`).
"""

from __future__ import annotations

import itertools
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from django.db import connections
from tqdm import tqdm

from ..cells import store as cell_store
from ..exceptions import SchemalessError, UniqueViolation
from ..tables.cells import ENTITY_COLUMN
from ..writes.entity_writes import check_batch_size, put_prepared
from ..writes.protocol import Change
from .batch_checks import Checked, check, check_claims
from .items import Item, Source
from .lines import CellLine
from .summary import SHOWN_REJECTS, ImportSummary, Rejected, reason

DEFAULT_BATCH = 1000
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Importer:
    """Imports the items of a :class:`~.items.Source` into the store; :meth:`run` returns an
    :class:`ImportSummary`. ``model`` is the entity model (``Entity``), ``cell_model`` the
    cell model (``Cell``) for cell lines. See the module docs."""

    def __init__(
        self,
        model: Any,
        *,
        cell_model: Any = None,
        batch_size: int = DEFAULT_BATCH,
        strict: bool = False,
        rejects: str | Path | None = None,
        progress: bool = False,
        progress_file: TextIO | None = None,
    ) -> None:
        check_batch_size(batch_size)
        self.model = model
        self.cell_model = cell_model
        self.batch_size = batch_size
        self.strict = strict
        self.rejects = None if rejects is None else Path(rejects)
        self.progress = progress
        self.progress_file = progress_file
        self.history = True
        self._rejects_file: TextIO | None = None
        self._stop = threading.Event()

    def stop(self) -> None:
        """Finish the current batch, then end the run."""
        self._stop.set()

    def run(self, source: Source) -> ImportSummary:
        clock = time.monotonic()
        summary = ImportSummary(item_name=getattr(source, "item_name", "item"))
        if self.rejects is not None:
            self.rejects.unlink(missing_ok=True)  # this run's rejects only
        restore = self._handle_signals()
        items = iter(source)
        reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-reader")
        try:
            with tqdm(
                total=source.total(),
                desc="import",
                unit=source.unit,
                unit_scale=source.unit == "B",
                disable=not self.progress,
                file=self.progress_file,
                dynamic_ncols=True,
                mininterval=0.5,
            ) as bar:
                ahead = reader.submit(self._read, items)
                while True:
                    checked = ahead.result()
                    if checked is None:
                        break
                    # The items are read on one thread, one batch at a time: the next batch is
                    # asked for only once this one is in.
                    ahead = reader.submit(self._read, items)
                    go_on = self._apply(checked, summary)
                    bar.update(checked.size)
                    if not go_on:
                        break
                    if self._stop.is_set():
                        summary.interrupted = True
                        break
        finally:
            restore()
            # The reader's own database connections (a model's rows, index states).
            reader.submit(connections.close_all).result()
            reader.shutdown()
            if self._rejects_file is not None:
                self._rejects_file.close()
                self._rejects_file = None
        summary.seconds = time.monotonic() - clock
        return summary

    def _read(self, items: Iterator[Item]) -> Checked | None:
        batch = list(itertools.islice(items, self.batch_size))
        return check(batch, self.model) if batch else None

    # --- one batch ----------------------------------------------------------------------------

    def _apply(self, checked: Checked, summary: ImportSummary) -> bool:
        """Write one checked batch; False when the import is to stop (``strict``)."""
        summary.read += len(checked.items)
        summary.entity_lines += checked.entity_lines
        summary.cell_lines += len(checked.cells)
        summary.framing += (checked.header is not None) + (checked.end is not None)
        if checked.header is not None:
            summary.header = checked.header
            self.history = not checked.header.cells
        if checked.end is not None:
            summary.end = checked.end
        check_claims(checked)
        if checked.bad and self.strict:
            summary.stopped = checked.bad[0][1]
            summary.rejected += 1
            return False
        for _position, rejected in checked.bad:
            self._reject(rejected, summary)
        owners = [item for _position, item in checked.owners]
        if not self._write(checked.entities, checked.changes, owners, summary):
            return False
        return self._cells(checked.cells, summary)

    def _write(
        self, entities: list[Any], changes: list[Change], owners: list[Item], summary: ImportSummary
    ) -> bool:
        # Batches committed before a violation are written; the retry finds them unchanged.
        written = [0]
        while entities:
            try:
                put_prepared(
                    entities,
                    changes,
                    self.batch_size,
                    skip_unchanged=True,
                    history=self.history,
                    written=written,
                )
            except UniqueViolation as exc:
                # Claimed by a concurrent writer after the check: find whose claim it was.
                position = next(
                    (
                        n
                        for n, change in enumerate(changes)
                        if any(i.name == exc.index and v == exc.values for i, v in change.rows)
                    ),
                    None,
                )
                if position is None:
                    raise
                if self.strict:
                    summary.written += written[0]
                    summary.stopped = Rejected(owners[position], reason(exc))
                    summary.rejected += 1
                    summary.partial = True
                    return False
                self._reject(Rejected(owners[position], reason(exc)), summary)
                del entities[position], changes[position], owners[position]
                continue
            distinct = len({change.key for change in changes})
            # Written over another body (step 1 found it stored): changed; the rest written
            # are new (rows committed before a violation count as new: the retry finds them).
            changed = {
                change.key
                for change in changes
                if change.found is not None and change.found.body != change.body
            }
            summary.new += written[0] - len(changed)
            summary.written += written[0]
            summary.unchanged += distinct - written[0]
            return True
        return True

    def _cells(self, cell_items: list[tuple[Item, CellLine]], summary: ImportSummary) -> bool:
        history: list[tuple[bytes, int, bytes | None, Any]] = []
        for item, line in cell_items:
            try:
                if line.column == ENTITY_COLUMN:
                    body = cell_store.encode(line.properties)
                    history.append((line.row_key.bytes, line.ref_key, body, line.created_at))
                    continue
                if self.cell_model is None:
                    raise ValueError("cell lines are not imported here")
                cell_store.put(
                    self.cell_model,
                    line.row_key,
                    line.column,
                    line.properties,
                    ref_key=line.ref_key,
                    created=line.created_at,
                )
                summary.cells += 1
            except (SchemalessError, ValueError, TypeError) as exc:
                rejected = Rejected(item, reason(exc))
                if self.strict:
                    summary.stopped = rejected
                    summary.rejected += 1
                    return False
                self._reject(rejected, summary)
        if history:
            summary.cells += cell_store.restore_history(history)
        return True

    # --- reporting ----------------------------------------------------------------------------

    def _reject(self, rejected: Rejected, summary: ImportSummary) -> None:
        summary.rejected += 1
        if len(summary.shown) < SHOWN_REJECTS:
            summary.shown.append(rejected)
        if self.rejects is None:
            return
        if self._rejects_file is None:
            self._rejects_file = open(self.rejects, "w", encoding="utf-8")  # noqa: SIM115
            summary.rejects_path = str(self.rejects)
        self._rejects_file.write(rejected.as_json())

    def _handle_signals(self) -> Any:
        """SIGINT/SIGTERM finish the batch under way, then end the run (a second one stops at
        once); only in the main thread, where Python delivers signals."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS}

        def handler(signum: int, frame: Any) -> None:
            self._stop.set()
            for sig, old in previous.items():
                signal.signal(sig, old)

        for sig in _STOP_SIGNALS:
            signal.signal(sig, handler)

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore
