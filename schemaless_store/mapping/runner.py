"""A ``mapentities`` run: the function and what limits it, one worker per shard
(:mod:`.walk`), a graceful stop on SIGINT/SIGTERM, and the summary."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from django.apps import apps
from django.db import connections
from django.utils.module_loading import import_string

from ..config import conf
from ..config.indexes import KIND_PROPERTY
from ..exceptions import ConfigurationError
from ..guards.throttle import LatencyProbe, Throttle
from ..tables.map_runs import Checkpoint, create_tables, forget_run, has_saved, load, run_key
from ..topology import bucket_map, servers, shards
from ..values import bounds
from .apply import Example
from .walk import DONE, ShardOutcome, ShardWalk

DEFAULT_BATCH_SIZE = 500
# Failures listed verbatim in a summary.
SHOWN_FAILURES = 10


@dataclass
class MapSummary:
    """What a run did, over every shard."""

    name: str
    dry_run: bool = False
    seen: int = 0
    changed: int = 0
    deleted: int = 0
    conflicts: int = 0
    failed: int = 0
    skipped: int = 0  # entities an earlier run of the same function had saved
    seconds: float = 0.0
    shards: dict[str, str] = field(default_factory=dict)  # alias -> status
    problems: list[str] = field(default_factory=list)  # stops, locks held, shard failures
    failures: list[tuple[uuid.UUID, str]] = field(default_factory=list)  # the first ones
    examples: list[Example] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every shard walked to its end, and no entity failed."""
        return (
            not self.failed and not self.problems and all(s == DONE for s in self.shards.values())
        )

    def add(self, outcome: ShardOutcome) -> None:
        self.shards[outcome.alias] = outcome.status
        if outcome.message:
            self.problems.append(f"{outcome.alias}: {outcome.status}: {outcome.message}")
        point = outcome.point
        if point is not None:  # this run's part of the checkpoint's counts
            for name in ("seen", "changed", "deleted", "conflicts", "skipped"):
                done = getattr(point, name) - outcome.before.get(name, 0)
                setattr(self, name, getattr(self, name) + done)
        self.failed += len(outcome.failures)
        for key, message in outcome.failures:
            if len(self.failures) < SHOWN_FAILURES:
                self.failures.append((uuid.UUID(bytes=key), message))
        self.examples.extend(outcome.examples[: 3 - len(self.examples)])

    def describe(self) -> str:
        verb = ("would change", "would delete") if self.dry_run else ("changed", "deleted")
        text = (
            f"{self.name}: {self.seen} seen, {self.changed} {verb[0]}, {self.deleted} {verb[1]}, "
            f"{self.conflicts} conflicts retried, {self.failed} failed"
        )
        if self.skipped:
            text += f", {self.skipped} skipped (saved by an earlier run)"
        return text + f" in {self.seconds:.1f}s"


@dataclass(frozen=True, kw_only=True)
class MapOptions:
    """How one run goes: :func:`~schemaless_store.mapping.map_entities`' keywords, declared
    once. ``where``: only the entities ``filter_index(**where)`` finds. ``shards``: walk only
    these. ``sleep``, ``duty``, ``max_latency`` (seconds): the cleaner's throttle.
    ``kind``: only the entities of that kind (docs/kinds.md), given to the function as instances
    of the kind's class (saved without the kind's validation: this is how stored values that no
    longer fit are mended); ``where`` then uses the kind's indexes.
    ``dry_run``: write nothing; the summary counts what would change and holds 3 examples.
    ``rewrite_bodies``: also save each entity whose stored body is not what the configured
    codec writes, keeping its ``updated`` time (``manage.py rewritebodies``).
    ``restart``: forget an earlier run of the same function and ``where`` (its checkpoints,
    which entities it saved, its failures) and start over. ``progress``: a bar per shard on
    ``progress_file``."""

    where: Mapping[str, Any] | None = None
    kind: str | None = None
    shards: Sequence[str] | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    sleep: float = 0.0
    duty: float = 1.0
    max_latency: float | None = None
    dry_run: bool = False
    rewrite_bodies: bool = False
    restart: bool = False
    progress: bool = False
    progress_file: TextIO | None = None

    def __post_init__(self) -> None:
        size = self.batch_size
        if not bounds.whole(size):
            raise ValueError(f"batch_size must be a whole number of at least 1, not {size!r}")


class Mapper:
    """Everything the shard workers of one run share (see :func:`map_entities`)."""

    def __init__(self, function: Callable[[Any], Any] | str, options: MapOptions) -> None:
        self.fn, path = _function(function)
        where, kind = options.where, options.kind
        self.where = dict(where) if where else None
        self.name = path + (f" --where {_where_text(self.where)}" if self.where else "")
        self.name += f" --kind {kind}" if kind is not None else ""
        self.rewrite = options.rewrite_bodies
        if self.rewrite:  # rewriting into another codec later is another run
            codec = type(conf.get().codec)
            self.name += f" --rewrite-bodies {codec.__module__}.{codec.__qualname__}"
        self.short_name = path.rsplit(".", 1)[-1]
        self.run = run_key(self.name)
        # The model by name: the paths never import the Django face above them.
        self.model = apps.get_model("schemaless_store", "Entity")
        if kind is not None:
            self.model = _kind_model(kind)
            self.fn = _of_kind(self.fn, kind)
        self.aliases = list(shards.shard_aliases())
        self.walked = shards.resolve_aliases(options.shards)
        self.batch_size = options.batch_size
        self.throttle = Throttle(options.sleep, options.duty, options.max_latency)
        self.dry_run = options.dry_run
        self.restart = options.restart
        self.progress = options.progress
        self.progress_file = options.progress_file
        self.stopping = threading.Event()
        self.latency: LatencyProbe | None = None
        self.checkpoints: dict[str, Checkpoint] = {}
        self.check_saved = False
        self.map_version = 0
        self.where_ids: dict[str, list[bytes]] = {}

    def probe(self) -> float:
        if self.latency is not None:
            return self.latency.recent()
        return servers.probe_latency(self.aliases)

    def stop(self) -> None:
        """Finish each shard's current batch, then end the run (a rerun resumes)."""
        self.stopping.set()

    def execute(self) -> MapSummary:
        summary = MapSummary(self.name, dry_run=self.dry_run)
        started = time.monotonic()
        if bucket_map.moves_unfinished():
            summary.problems.append(
                "a bucket move is under way: its copies are on two shards and its rows change "
                "shard; run mapentities once `manage.py movebuckets` has finished"
            )
            return summary
        self.map_version = bucket_map.stored().version
        if not self.dry_run:
            for alias in self.aliases:
                create_tables(alias)
            if self.restart:
                forget_run(self.run, self.aliases)
            self.checkpoints = load(self.run, self.aliases)
            self.check_saved = has_saved(self.run, self.aliases)
        if self.where is not None:
            for entity_id in self.model.objects.filter_index(**self.where).ids():
                key = entity_id.bytes
                self.where_ids.setdefault(bucket_map.alias_for(key), []).append(key)
        if self.throttle.max_latency is not None:
            self.latency = LatencyProbe(
                lambda: servers.probe_latency(self.aliases), on_exit=connections.close_all
            ).start()
        restore = _on_stop_signals(self.stopping)
        try:
            walks = [ShardWalk(self, alias) for alias in self.walked]
            outcomes: list[ShardOutcome | None] = [None] * len(walks)

            def work(number: int) -> None:
                outcomes[number] = walks[number].run(position=number)

            threads = [
                threading.Thread(target=work, args=(n,), name=f"map-{walk.alias}")
                for n, walk in enumerate(walks)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                while thread.is_alive():
                    thread.join(timeout=0.2)
                    restore.relay()
        finally:
            restore()
            if self.latency is not None:
                self.latency.stop()
        for outcome in outcomes:
            if outcome is not None:
                summary.add(outcome)
        summary.seconds = time.monotonic() - started
        return summary


def _function(function: Callable[[Any], Any] | str) -> tuple[Callable[[Any], Any], str]:
    if isinstance(function, str):
        try:
            found = import_string(function)
        except ImportError as exc:
            raise ConfigurationError(f"cannot import {function!r}: {exc}") from exc
        if not callable(found):
            raise ConfigurationError(f"{function!r} is not a function")
        return found, function
    if not callable(function):
        raise ConfigurationError(f"{function!r} is not a function")
    return function, f"{function.__module__}.{function.__qualname__}"


def _kind_model(kind: str) -> Any:
    """The kind's class, found by its stored name among the installed models."""
    for model in apps.get_models():
        options = getattr(model, "_kind", None)
        if options is not None and options.name == kind:
            return model
    raise ConfigurationError(f"no kind is named {kind!r} (a Kind's Meta.kind_name)")


def _of_kind(fn: Callable[[Any], Any], kind: str) -> Callable[[Any], Any]:
    """``fn`` for the entities of ``kind``; every other entity is left as it is."""

    def of_kind(entity: Any) -> Any:
        if entity.get(KIND_PROPERTY) != kind:
            return None
        return fn(entity)

    return of_kind


def _where_text(where: Mapping[str, Any]) -> str:
    return " ".join(f"{name}={where[name]!r}" for name in sorted(where))


class _Restore:
    """The stop signals' previous handlers; :meth:`relay` turns a signal into a stop."""

    def __init__(self, stopping: threading.Event) -> None:
        self.stopping = stopping
        self.signalled = False
        self.previous: dict[int, Any] = {}

    def relay(self) -> None:
        # The handler only sets a flag (it may run while this thread holds a lock); the stop
        # event is set here, between two joins.
        if self.signalled:
            self.stopping.set()

    def __call__(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def _on_stop_signals(stopping: threading.Event) -> _Restore:
    restore = _Restore(stopping)
    if threading.current_thread() is not threading.main_thread():
        return restore

    def handler(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and restore.signalled:
            raise KeyboardInterrupt
        restore.signalled = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        restore.previous[sig] = signal.signal(sig, handler)
    return restore
