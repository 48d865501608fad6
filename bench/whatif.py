"""``python -m bench.whatif``: measure proposed hot-path changes before anyone makes them.

Each experiment is a change to ``schemaless_store`` that the profile suggests, applied here by
monkeypatching, in this process only (the package's files are never touched), so its gain can be
measured against the raw baseline in the same process, on the same data, alternating with the
unchanged code::

    .venv/bin/python -m bench.whatif --entities 100000
    .venv/bin/python -m bench.whatif --entities 200000 --cleaner   # backfill settings instead

For each op, the table shows ours unchanged, ours with each experiment that touches its path, and
ours with all of them. The machine is noisy, so the variants take turns in many short rounds (the
order rotating), raw runs right after each of them, and the table reports medians over rounds:
ours' wall and client CPU per op, and ours/raw throughput computed within each round. These are
measurements of candidate patches, not of the shipped code; each patch must leave the answers
unchanged (checked on a sample before timing).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .profile import ops

Undo = Callable[[], None]


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    ops: tuple[str, ...]
    apply: Callable[[], Undo]
    combine: bool = True  # part of the "all of the above" variant


def _patch(owner: Any, name: str, value: Any) -> Undo:
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    return lambda: setattr(owner, name, original)


# --- experiments ---------------------------------------------------------------------------


def fast_rows() -> Undo:
    """``fetch_by_ids`` builds entities without ``Model.__init__`` (no per-field setattr loop,
    no pre/post_init signals: nothing listens for them on Entity; refuses if something does),
    with its imports at module level instead of three function-level imports per call."""
    from schemaless_store import conf, query, shards

    from_row = _fast_entity()

    def fetch_by_ids(ids: Iterable[bytes]) -> dict[bytes, Any]:
        alias_for = shards.alias_for
        by_alias: dict[str, list[bytes]] = defaultdict(list)
        for entity_id in dict.fromkeys(ids):
            by_alias[alias_for(entity_id)].append(entity_id)
        found: dict[bytes, Any] = {}
        batch = conf.get().fetch_batch
        for alias, alias_ids in by_alias.items():
            conn = shards.connection(alias)
            convert = conn.ops.convert_datetimefield_value
            for start in range(0, len(alias_ids), batch):
                chunk = alias_ids[start : start + batch]
                marks = ", ".join(["%s"] * len(chunk))
                rows = shards.read(
                    alias,
                    f"SELECT {query.ENTITY_COLUMNS} FROM entities WHERE id IN ({marks})",
                    chunk,
                )
                for added_id, row_id, updated, body in rows:
                    found[row_id] = from_row(
                        alias, added_id, row_id, convert(updated, None, conn), body
                    )
        return found

    return _patch(query, "fetch_by_ids", fetch_by_ids)


def _fast_entity() -> Callable[..., Any]:
    """An Entity built from a row without ``Model.__init__`` (see :func:`fast_rows`)."""
    from django.db.models.base import ModelState
    from django.db.models.signals import post_init, pre_init

    from schemaless_store.models import Entity

    if pre_init.has_listeners(Entity) or post_init.has_listeners(Entity):
        raise RuntimeError("something listens to Entity's init signals: the shortcut is unsafe")
    new = object.__new__

    def from_row(alias: str, added_id: int, row_id: bytes, updated: Any, body: bytes) -> Any:
        entity = new(Entity)
        state = ModelState()
        state.adding = False
        state.db = alias
        entity.__dict__.update(
            _state=state,
            added_id=added_id,
            row_id=row_id,
            row_updated=updated,
            row_body=body,
            _props=None,
            _generated_id=False,
        )
        return entity

    return from_row


def get_direct() -> Undo:
    """``Entity.objects.get(id=...)`` reads its one row itself (``WHERE id = %s`` on the owning
    shard, entity built as in ``fast_rows``) instead of going through ``get_many`` and
    ``fetch_by_ids`` (lists, dicts and a UUID per call for one id)."""
    from schemaless_store import keys, shards
    from schemaless_store.models import EntityManager

    from_row = _fast_entity()
    original = EntityManager.get

    def get(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args or set(kwargs) != {"id"}:
            return original(self, *args, **kwargs)  # its error message
        raw_id = keys.entity_id_bytes(kwargs["id"])
        alias = shards.alias_for(raw_id)
        rows = shards.read(
            alias, "SELECT added_id, id, updated, body FROM entities WHERE id = %s", [raw_id]
        )
        if not rows:
            raise self.model.DoesNotExist(f"no entity with id {kwargs['id']!r}")
        added_id, row_id, updated, body = rows[0]
        conn = shards.connection(alias)
        updated = conn.ops.convert_datetimefield_value(updated, None, conn)
        return from_row(alias, added_id, row_id, updated, body)

    return _patch(EntityManager, "get", get)


def index_once() -> Undo:
    """Slicing a query keeps the index ``order_by()`` already chose (and the converted
    conditions): ``choose_index`` runs once per query, not twice."""
    from schemaless_store.query import IndexQuery

    original = IndexQuery.__getitem__

    def getitem(self: Any, item: Any) -> Any:
        result = original(self, item)
        if isinstance(result, IndexQuery) and self._index is not None:
            result._index = self._index
            if "_conds" in self.__dict__:
                result._conds = self._conds
        return result

    return _patch(IndexQuery, "__getitem__", getitem)


def parallel_fetch() -> Undo:
    """``fetch_by_ids`` as in ``fast_rows``, and when the ids live on several shards, their
    ``IN`` queries run at once on the query module's scatter threads (as index reads already
    do), so a page over two shards waits for one entity round trip, not two."""
    from schemaless_store import conf, query, shards

    from_row = _fast_entity()

    def read_shard(alias: str, alias_ids: list[bytes]) -> list[Any]:
        conn = shards.connection(alias)
        convert = conn.ops.convert_datetimefield_value
        batch = conf.get().fetch_batch
        out = []
        for start in range(0, len(alias_ids), batch):
            chunk = alias_ids[start : start + batch]
            marks = ", ".join(["%s"] * len(chunk))
            rows = shards.read(
                alias, f"SELECT {query.ENTITY_COLUMNS} FROM entities WHERE id IN ({marks})", chunk
            )
            for added_id, row_id, updated, body in rows:
                out.append(from_row(alias, added_id, row_id, convert(updated, None, conn), body))
        return out

    def fetch_by_ids(ids: Iterable[bytes]) -> dict[bytes, Any]:
        alias_for = shards.alias_for
        by_alias: dict[str, list[bytes]] = defaultdict(list)
        for entity_id in dict.fromkeys(ids):
            by_alias[alias_for(entity_id)].append(entity_id)
        if len(by_alias) > 1:
            pool = query._scatter_pool()
            batches = list(pool.map(lambda item: read_shard(*item), by_alias.items()))
        else:
            batches = [read_shard(*item) for item in by_alias.items()]
        return {entity.row_id: entity for batch in batches for entity in batch}

    return _patch(query, "fetch_by_ids", fetch_by_ids)


def raw_read() -> Undo:
    """``shards.read`` runs its SELECT on the driver's cursor under Django's error wrapper,
    instead of a Django ``CursorWrapper`` (two Python layers and a cursor object per read).
    Keeps Django's cursor when queries are being logged (DEBUG, debug toolbar)."""
    from django.db import connections

    from schemaless_store import shards

    original = shards.read

    def read(alias: str, sql: str, params: Any) -> list[tuple[Any, ...]]:
        conn = connections[alias]
        if conn.queries_logged or conn.in_atomic_block or conn.connection is None:
            return original(alias, sql, params)
        with shards.errors_named(alias), conn.wrap_database_errors:
            cursor = conn.connection.cursor()
            try:
                cursor.execute(sql, params)
                return list(cursor.fetchall())
            finally:
                cursor.close()

    return _patch(shards, "read", read)


def props_import() -> Undo:
    """``Entity._properties`` decodes with a module-level ``decode_body`` instead of importing
    it on every call (a function-level ``from .codec import ...`` costs ~1 us per entity)."""
    from schemaless_store.codec import decode_body
    from schemaless_store.exceptions import CorruptBody
    from schemaless_store.models import Entity

    def _properties(self: Any) -> dict[str, Any]:
        props = self._props
        if props is None:
            try:
                props = self._props = decode_body(bytes(self.row_body))
            except CorruptBody as exc:
                raise CorruptBody(f"entity {self.id}: {exc}") from None
        return props

    return _patch(Entity, "_properties", _properties)


def recheck_memo() -> Undo:
    """The query's re-check encodes each indexed property value of each entity once per query
    value, not once per entity: ``index.column_value`` memoized per (property, type, value) for
    the query's lifetime, and no cartesian ``rows_for`` set for scalar properties."""
    from schemaless_store.exceptions import IndexValueError
    from schemaless_store.query import IndexQuery

    def _row_is_current(self: Any, index: Any, row: tuple[Any, ...], entity: Any) -> bool:
        memo = self.__dict__.setdefault("_column_memo", {})
        props = entity.body_properties()
        for position, prop in enumerate(index.properties):
            if prop not in props:
                return False
            value = props[prop]
            elements = value if type(value) is list else (value,)
            hit = False
            for element in elements:
                try:
                    key = (prop, type(element), element)
                    column = memo.get(key)
                    if column is None:
                        column = memo[key] = index.column_value(prop, element)
                except TypeError:  # unhashable: not an index value anyway
                    return False
                except IndexValueError:
                    return False
                if column == row[position]:
                    hit = True
                    break
            if not hit:
                return False
        return self._row_meets_conditions(index, tuple(row[:-1]))

    return _patch(IndexQuery, "_row_is_current", _row_is_current)


def exact_page() -> Undo:
    """A sliced query reads ``limit`` index rows first, not ``limit + 8``: the 8 extra entities
    are fetched and built for every page but only needed when stale rows are skipped (then the
    next batch refills the page, as it already does past the 8)."""
    from schemaless_store.query import IndexQuery

    def _batch_size(self: Any) -> int:
        if self.limit is None:
            return 500
        return max(1, min(1000, self.offset + self.limit))

    return _patch(IndexQuery, "_batch_size", _batch_size)


def begin_commit() -> Undo:
    """A put's transaction is ``BEGIN`` ... ``COMMIT`` statements on a connection left in
    autocommit, instead of Django's ``atomic()`` (``SET autocommit=0``, ``COMMIT``,
    ``SET autocommit=1``): one round trip fewer per put. Inside a caller's own ``atomic()`` block
    the store keeps using ``atomic()`` (a savepoint)."""
    from django.db import connections, transaction

    from schemaless_store import writes

    @contextlib.contextmanager
    def atomic(using: str | None = None, savepoint: bool = True) -> Iterator[None]:
        conn = connections[using or "default"]
        if conn.in_atomic_block or not conn.get_autocommit():
            with transaction.atomic(using=using, savepoint=savepoint):
                yield
            return
        with conn.cursor() as cursor:
            cursor.execute("BEGIN")
        try:
            yield
        except BaseException:
            conn.connection.rollback()
            raise
        conn.connection.commit()

    shim = type("transaction", (), {"atomic": staticmethod(atomic)})()
    for name in ("on_commit", "mark_for_rollback_on_error"):
        setattr(shim, name, getattr(transaction, name))
    return _patch(writes, "transaction", shim)


def create_direct() -> Undo:
    """The ceiling of the put path inside the store: ``create()`` of a new entity with a
    generated id runs ``writes.prepare`` and ``writes.add_index_rows`` (the store's own code)
    but issues ``BEGIN``, the entity ``INSERT`` and ``COMMIT`` on the driver's cursor instead of
    Django's ``save_base`` (SQL compiler, signals) inside ``atomic()``. A real change would still
    send ``pre_save``/``post_save`` for other receivers (nothing else listens here)."""
    from django.db import connections
    from django.utils import timezone

    from schemaless_store import writes
    from schemaless_store.models import EntityManager

    original = EntityManager.create

    def create(self: Any, **properties: Any) -> Any:
        if "id" in properties:
            return original(self, **properties)
        entity = self.model(**properties)
        prepared = writes.prepare(entity, force_insert=True)
        conn = connections[prepared.alias]
        conn.ensure_connection()
        if conn.in_atomic_block:
            return original(self, **properties)
        now = timezone.now()
        cursor = conn.connection.cursor()
        with conn.wrap_database_errors:
            cursor.execute("BEGIN")
            try:
                cursor.execute(
                    "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)",
                    (prepared.entity_id, conn.ops.adapt_datetimefield_value(now), prepared.body),
                )
                writes.add_index_rows(
                    (index, row, prepared.entity_id) for index, row in prepared.rows
                )
            except BaseException:
                conn.connection.rollback()
                raise
            conn.connection.commit()
        entity.added_id = cursor.lastrowid
        entity.row_updated, entity.row_body = now, prepared.body
        entity._state.adding, entity._state.db = False, prepared.alias
        return entity

    return _patch(EntityManager, "create", create)


EXPERIMENTS = [
    Experiment(
        "fast_rows",
        fast_rows.__doc__ or "",
        ("get", "get_many", "query_page", "query_all"),
        fast_rows,
    ),
    Experiment(
        "parallel_fetch",
        parallel_fetch.__doc__ or "",
        ("get_many", "query_page", "query_all"),
        parallel_fetch,
        combine=False,  # it replaces fast_rows' fetch_by_ids, and did not pay on 2 cores
    ),
    Experiment(
        "raw_read", raw_read.__doc__ or "", ("get", "get_many", "query_page", "query_all"), raw_read
    ),
    Experiment(
        "props_import",
        props_import.__doc__ or "",
        ("get", "get_many", "query_page", "query_all"),
        props_import,
    ),
    Experiment(
        "recheck_memo", recheck_memo.__doc__ or "", ("query_page", "query_all"), recheck_memo
    ),
    Experiment("exact_page", exact_page.__doc__ or "", ("query_page",), exact_page),
    Experiment("get_direct", get_direct.__doc__ or "", ("get",), get_direct),
    Experiment("index_once", index_once.__doc__ or "", ("query_page",), index_once),
    Experiment("begin_commit", begin_commit.__doc__ or "", ("put",), begin_commit),
    Experiment("create_direct", create_direct.__doc__ or "", ("put",), create_direct),
]


@contextlib.contextmanager
def applied(experiments: list[Experiment]) -> Iterator[None]:
    undo = [experiment.apply() for experiment in experiments]
    try:
        yield
    finally:
        for step in reversed(undo):
            step()


def _same(bench: Any, name: str, ours: Callable[[Any], Any], make_arg: Callable[[], Any]) -> Any:
    """What ours returns, made comparable (titles in order), to check a patch changes nothing."""
    if name in ("get_many", "put", "bulk_put"):
        return None
    bench.rng.seed(len(name))
    found = ours(make_arg())
    if isinstance(found, list):
        return [props["title"] for props in found]
    return found


def _timed(op: Callable[[Any], Any], args: list[Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for arg in args:
        op(arg)
    return time.perf_counter() - wall, time.process_time() - cpu


def compare_variants(
    ours: Callable[[Any], Any],
    raw: Callable[[Any], Any],
    make_arg: Callable[[], Any],
    variants: list[tuple[str, list[Experiment]]],
    n: int,
    rounds: int,
) -> dict[str, dict[str, float]]:
    """Medians over rounds; in each round every variant runs ``n`` ops, then raw runs the same
    ``n`` arguments, and ours/raw throughput is taken from that pair."""
    samples: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in variants}
    for number in range(rounds):
        shift = number % len(variants)
        for label, experiments in variants[shift:] + variants[:shift]:
            args = [make_arg() for _ in range(n)]
            with applied(experiments):
                wall, cpu = _timed(ours, args)
            raw_wall, _raw_cpu = _timed(raw, args)
            samples[label].append((wall / n * 1e6, cpu / n * 1e6, raw_wall / wall))
    return {
        label: {
            "wall": statistics.median(s[0] for s in rows),
            "cpu": statistics.median(s[1] for s in rows),
            "ratio": statistics.median(s[2] for s in rows),
        }
        for label, rows in samples.items()
    }


CLEANER_VARIANTS: list[tuple[str, dict[str, str], list[str]]] = [
    ("defaults", {}, []),
    ("CONN_MAX_AGE=60", {"BENCH_CONN_MAX_AGE": "60"}, []),
    ("--batch-size 2000", {}, ["--batch-size", "2000"]),
    ("both", {"BENCH_CONN_MAX_AGE": "60"}, ["--batch-size", "2000"]),
]


def cleaner_variants(bench: Any, rounds: int) -> None:
    """Backfill a fresh index on the loaded store with ``runcleaner`` under each variant (no
    writer), each on a settled server, variants in alternating order; the backfill passes' own
    entities/s as recorded by the cleaner, and the child's peak RSS."""
    import dataclasses
    import os
    import subprocess

    from django.core.management import call_command

    from schemaless_store import lifecycle
    from schemaless_store.indexes import Index, registry
    from schemaless_store.models import CleanerPass

    from .load import settle

    bench.plan = dataclasses.replace(bench.plan, settle_s=30.0)
    rates: dict[str, list[float]] = {label: [] for label, _, _ in CLEANER_VARIANTS}
    rss: dict[str, float] = {}
    for number in range(rounds):
        order = CLEANER_VARIANTS if number % 2 == 0 else CLEANER_VARIANTS[::-1]
        for label, extra_env, extra_args in order:
            name = f"index_link_w{number}_{len(rates[label])}_{abs(hash(label)) % 10_000}"
            registry.register(Index(table=name, properties=["link"], shard_on="link"))
            call_command("migrateall", verbosity=0)
            registry.unregister(name)  # declared in the child only: nothing here writes
            settle(bench)
            env = {**os.environ, "BENCH_LINK_INDEX": name, **extra_env}
            command = [sys.executable, "-m", "django", "runcleaner", f"--index={name}", "--once"]
            proc = subprocess.Popen([*command, "-v", "0", *extra_args], env=env)
            while lifecycle.states(refresh=True).get(name) != lifecycle.READY:
                if proc.poll() is not None:
                    raise RuntimeError(f"runcleaner failed under {label}")
                time.sleep(0.05)
            proc.terminate()  # the repair pass that follows is not measured
            _pid, _status, usage = os.wait4(proc.pid, 0)
            passes = list(CleanerPass.objects.filter(index_name=name, kind="backfill"))
            seconds = sum((p.finished - p.started).total_seconds() for p in passes)
            rates[label].append(sum(p.entities_scanned for p in passes) / seconds)
            rss[label] = max(rss.get(label, 0.0), usage.ru_maxrss / 1024)
    print(f"backfill of a new index over {bench.size:,} entities, no writer, {rounds} rounds\n")
    print("| variant | entities/s (median) | each round | peak RSS MiB |")
    print("|---|---:|---|---:|")
    for label, found in rates.items():
        each = ", ".join(f"{r:,.0f}" for r in found)
        print(f"| {label} | {statistics.median(found):,.0f} | {each} | {rss[label]:.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.whatif")
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--ops", default="put,get,get_many,query_page,query_all")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--cleaner", action="store_true", help="compare runcleaner backfill settings instead"
    )
    args = parser.parse_args(argv)

    from . import plan as plans
    from .data import stages
    from .load import load_stage
    from .run import setup

    bench = setup(plans.choose(quick=args.entities < 10_000, sizes=[args.entities]))
    for stage in stages([args.entities]):
        load_stage(bench, stage)
    if args.cleaner:
        cleaner_variants(bench, rounds=min(args.rounds, 3))
        return 0
    table = ops(bench)
    print(
        f"what-if at {bench.size:,} entities; medians over {args.rounds} rounds, raw run "
        "right after each variant in every round\n"
    )
    print("| op | variant | ours wall us/op | ours client CPU us/op | ours/raw throughput |")
    print("|---|---|---:|---:|---:|")
    for name in args.ops.split(","):
        ours, raw, make_arg = table[name]
        n = {"put": 100, "get": 200, "get_many": 10, "query_page": 30, "query_all": 15}[name]
        relevant = [e for e in EXPERIMENTS if name in e.ops]
        variants: list[tuple[str, list[Experiment]]] = [("unchanged", [])]
        variants += [(e.name, [e]) for e in relevant]
        combined = [e for e in relevant if e.combine]
        if len(combined) > 1:
            label = "all of the above" + (
                " but parallel_fetch" if len(combined) < len(relevant) else ""
            )
            variants.append((label, combined))
        reference = None
        for label, experiments in variants:
            with applied(experiments):
                for _ in range(10):
                    ours(make_arg())
                answer = _same(bench, name, ours, make_arg)
            if reference is None:
                reference = answer
            elif answer != reference:
                raise AssertionError(f"{label} changes the answer of {name}")
        found = compare_variants(ours, raw, make_arg, variants, n, args.rounds)
        for label, _ in variants:
            row = found[label]
            print(
                f"| {name} | {label} | {row['wall']:,.0f} | {row['cpu']:,.0f}"
                f" | {row['ratio']:.2f}x |",
                flush=True,
            )
    print("\nExperiments:")
    for experiment in EXPERIMENTS:
        print(f"- {experiment.name}: {' '.join(experiment.description.split())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
