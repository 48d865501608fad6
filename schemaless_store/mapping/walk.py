"""One shard's worker of a ``mapentities`` run: its lock, its failures retried, then its walk
in batches, each checkpointed, throttled and counted on a progress bar.

The walk reads the shard's ``entities`` by ``added_id`` up to the end it noted when it began
(entities created later were written by code that already writes the new shape), or, with
``--where``, the ids the ``filter_index`` query found on this shard, in id order.

A bucket move onto the shard since its checkpoint's map version brought rows the walk has not
seen, with the shard's new ``added_id``s, above the noted end: a rerun walks on past it, to
the shard's end now, taking only the rows of the buckets that arrived (:func:`arrived`), and
then notes the new end and map version (the run's "saved" marks keep an entity it had saved
on its old shard from being mapped twice). After each
read it reads the stored shard map's version again: a bucket move that began since the run
started could have copied rows the walk would skip, or move rows it has not reached yet, so
the worker stops there, with a clear message, before it uses the batch.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from django.db import DEFAULT_DB_ALIAS, connections
from tqdm import tqdm

from ..config import conf
from ..config.indexes import ENTITIES
from ..config.metadata import ShardMap
from ..guards.server_lock import ServerLock
from ..guards.throttle import Throttle
from ..query.fetch import fetch_by_ids
from ..sql.values import datetime_converter
from ..tables import entities as entity_table
from ..tables.map_runs import (
    COUNTS,
    Checkpoint,
    forget_failures,
    record_failure,
    saved_among,
)
from ..tables.map_runs import failures as recorded_failures
from ..tables.map_runs import save as save_checkpoint
from ..topology import bucket_map, replicas, shards
from ..values.bucket_hash import bucket_of
from .apply import Applier, BatchResult, Example

logger = logging.getLogger("schemaless_store.mapping")

DONE, INTERRUPTED, STOPPED, SKIPPED, FAILED = "done", "interrupted", "stopped", "skipped", "failed"


class MoveBegan(Exception):
    """The stored shard map changed while the run was walking."""


@dataclass
class ShardOutcome:
    """What one shard's worker did."""

    alias: str
    status: str = DONE
    message: str = ""
    point: Checkpoint | None = None
    before: dict[str, int] = field(default_factory=dict)  # the point's counts at the start
    failures: list[tuple[bytes, str]] = field(default_factory=list)
    examples: list[Example] = field(default_factory=list)


class MapRun(Protocol):
    """What a shard's walk reads of the :class:`~.runner.Mapper` whose run it is a part of
    (a protocol, so this module need not import the runner that imports it)."""

    fn: Callable[[Any], Any]
    model: Any
    name: str
    short_name: str
    run: str
    aliases: list[str]
    where: dict[str, Any] | None
    where_ids: dict[str, list[bytes]]
    batch_size: int
    throttle: Throttle
    dry_run: bool
    rewrite: bool
    progress: bool
    progress_file: TextIO | None
    stopping: threading.Event
    checkpoints: dict[str, Checkpoint]
    check_saved: bool
    map_version: int

    def probe(self) -> float: ...


def arrived(alias: str, since: int) -> set[int]:
    """The buckets ``alias`` owns in the stored map now that some version from ``since`` on
    gave to another shard: their rows reached ``alias`` (again) by a move since then, with new
    ``added_id``s."""
    stored = ShardMap.objects.using(DEFAULT_DB_ALIAS).filter(version__gte=since)
    versions = list(stored.order_by("version"))
    if len(versions) < 2:
        return set()
    count = conf.get().buckets
    owners = [conf.bucket_aliases(v.owners, count)[1] for v in versions]
    now = owners[-1]
    return {
        number
        for number in range(count)
        if now[number] == alias and any(o[number] != alias for o in owners[:-1])
    }


class ShardWalk:
    """The worker of one shard (``alias``) of a :class:`~.runner.Mapper`'s run."""

    def __init__(self, mapper: MapRun, alias: str) -> None:
        self.mapper = mapper
        self.alias = alias
        self.applier = Applier(
            mapper.model, mapper.fn, mapper.run, dry_run=mapper.dry_run, rewrite=mapper.rewrite
        )
        self.outcome = ShardOutcome(alias)
        # Buckets that moved onto the shard since the checkpoint's map version, and where the
        # walk ends for them (None: no move since, the walk ends at the checkpoint's ``upto``).
        self.arrived: set[int] | None = None
        # A finished walk opened again only for the buckets that arrived: a ``--where`` walk
        # then takes only their ids (ids above its last one are new since the run, as rows
        # above ``upto`` are for a walk without ``--where``).
        self.reopened = False
        self.end = 0

    def run(self, position: int = 0) -> ShardOutcome:
        mapper, alias = self.mapper, self.alias
        lock = None
        try:
            if not mapper.dry_run:
                lock = ServerLock(f"map-{mapper.run[:20]}", alias)
                if not lock.acquire(0.0):
                    self.outcome.status = SKIPPED
                    self.outcome.message = (
                        f"another mapentities run of {mapper.name} holds {lock.describe()}"
                    )
                    lock = None
                    return self.outcome
            point = mapper.checkpoints.get(alias) if not mapper.dry_run else None
            if point is None:
                point = Checkpoint(
                    mapper.run,
                    alias,
                    mapper.name[:400],
                    upto=entity_table.max_added_id(ENTITIES, alias),
                    map_version=mapper.map_version,
                )
            self.outcome.point = point
            self.outcome.before = {name: getattr(point, name) for name in COUNTS}
            if not mapper.dry_run:
                self._retry_failures(point)
            self.end = point.upto
            if point.map_version != mapper.map_version:
                self.arrived = arrived(alias, point.map_version)
                if self.arrived:
                    self.end = max(point.upto, entity_table.max_added_id(ENTITIES, alias))
                    self.reopened = point.done
                    point.done = False
            if not point.done:
                self._walk(point, position)
        except MoveBegan as exc:
            self.outcome.status, self.outcome.message = STOPPED, str(exc)
        except Exception as exc:
            logger.exception("mapentities on %s failed", alias)
            self.outcome.status, self.outcome.message = FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            if lock is not None:
                lock.release()
            self.outcome.examples = self.applier.examples
            connections.close_all()
            shards.close_index_connections()
        return self.outcome

    # --- the walk -----------------------------------------------------------------------------

    def _walk(self, point: Checkpoint, position: int) -> None:
        mapper, alias = self.mapper, self.alias
        where_ids = None
        if mapper.where is not None:
            found = sorted(mapper.where_ids.get(alias, []))
            where_ids = [
                k
                for k in found
                if not self.reopened and (point.last_id is None or k > point.last_id)
            ]
            if self.arrived:  # ids behind the checkpoint whose bucket moved here since
                count = conf.get().buckets
                came = {k for k in found if bucket_of(k, count) in self.arrived}
                where_ids = sorted(came.union(where_ids))
            total = len(where_ids)
        else:
            total = entity_table.count(ENTITIES, alias, self.end) - entity_table.count(
                ENTITIES, alias, point.last_added_id
            )
        bar = tqdm(
            total=max(total, 0),
            desc=f"{mapper.short_name} on {alias}",
            unit=" entities",
            disable=not mapper.progress,
            file=mapper.progress_file,
            position=position,
            dynamic_ncols=True,
            mininterval=0.5,
        )
        try:
            while True:
                if mapper.stopping.is_set():
                    self.outcome.status = INTERRUPTED
                    return
                began = time.monotonic()
                last: int | bytes | None
                if where_ids is None:
                    entities, last = self._next_rows(point)
                else:
                    entities, last = self._next_ids(where_ids)
                if last is None:
                    point.done = True
                    point.upto, point.map_version = self.end, mapper.map_version
                    self._save(point)
                    return
                self._apply(point, entities)
                if isinstance(last, int):
                    point.last_added_id = last
                else:
                    point.last_id = last
                self._save(point)
                bar.update(len(entities))
                mapper.throttle.after(began, mapper.stopping.wait, mapper.probe)
        finally:
            bar.close()

    def _next_rows(self, point: Checkpoint) -> tuple[list[Any], int | None]:
        """The next batch of the shard's entities (those it owns), and the last ``added_id``
        read (None: the walk is over)."""
        alias, mapper = self.alias, self.mapper
        with shards.errors_named(alias):
            rows = entity_table.by_added_id(alias, point.last_added_id, mapper.batch_size)
        rows = [row for row in rows if row[0] <= self.end]
        used = self._map_unchanged()
        if not rows:
            return [], None
        convert = datetime_converter(shards.connection(alias))
        build = mapper.model.row_builder()
        entities = [
            build(alias, added_id, bytes(key), convert(updated), bytes(body))
            for added_id, key, updated, body in rows
            if used.owners[bucket_of(bytes(key), used.buckets)] == alias
            and (
                added_id <= point.upto  # past it, only rows that a move brought here
                or (
                    self.arrived is not None and bucket_of(bytes(key), used.buckets) in self.arrived
                )
            )
        ]
        return entities, rows[-1][0]

    def _next_ids(self, pending: list[bytes]) -> tuple[list[Any], bytes | None]:
        """The next batch of the ids a ``--where`` query found on this shard."""
        chunk = pending[: self.mapper.batch_size]
        del pending[: len(chunk)]
        if not chunk:
            return [], None
        found = self._read(chunk)
        self._map_unchanged()
        return [found[key] for key in chunk if key in found], chunk[-1]

    def _map_unchanged(self) -> Any:
        """The stored map, after checking it is the one the run began under."""
        now = bucket_map.stored()
        if now.version != self.mapper.map_version or now.moving:
            moving = ", a move under way" if now.moving else ""
            raise MoveBegan(
                f"the shard map changed while the run walked {self.alias} (version "
                f"{self.mapper.map_version}, now {now.version}{moving}):"
                " a bucket move could hide entities from this walk, so it stopped here. Run "
                "the same command again once the move is done: it resumes from its checkpoints "
                "and skips every entity it already saved"
            )
        return now

    def _read(self, keys: list[bytes]) -> dict[bytes, Any]:
        """The entities as their primaries store them (a replica's lag would only cost
        conflicts)."""
        with replicas.from_primary():
            return fetch_by_ids(self.mapper.model, keys)

    # --- what a batch did ---------------------------------------------------------------------

    def _apply(self, point: Checkpoint, entities: list[Any]) -> BatchResult:
        mapper = self.mapper
        if mapper.check_saved and entities:
            saved = saved_among(mapper.run, [bytes(e.row_id) for e in entities], mapper.aliases)
            if saved:
                point.skipped += len(saved)
                entities = [e for e in entities if bytes(e.row_id) not in saved]
        result = self.applier.apply(entities)
        point.seen += result.seen
        point.changed += result.changed
        point.deleted += result.deleted
        point.conflicts += result.conflicts
        point.failed += len(result.failures)
        self.outcome.failures.extend(result.failures)
        if not mapper.dry_run:
            for key, message in result.failures:
                record_failure(self.alias, mapper.run, key, message)
        return result

    def _save(self, point: Checkpoint) -> None:
        if not self.mapper.dry_run:
            save_checkpoint(point)

    def _retry_failures(self, point: Checkpoint) -> None:
        """A rerun first retries the entities whose function raised last time."""
        failed = recorded_failures(self.alias, self.mapper.run)
        if not failed:
            return
        keys = [key for key, _message in failed]
        found = self._read(keys)
        point.failed = max(0, point.failed - len(failed))
        gone = [key for key in keys if key not in found]
        result = self._apply(point, [found[key] for key in keys if key in found])
        still = {key for key, _message in result.failures}
        forget_failures(self.alias, self.mapper.run, [*gone, *(set(keys) - still)])
        self._save(point)
