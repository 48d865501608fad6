"""``python -m bench.profile``: where the time of ours goes, next to the raw baseline.

    .venv/bin/python -m bench.profile --entities 100000 --ops put,get,get_many,query_page

Sets up the same servers and data as ``bench.run`` (one size), then for each op:

- counts the statements each side sends to the servers (every ``query()`` of a mysqlclient
  connection is a round trip) and lists ours, once;
- times ours and raw over the same arguments;
- profiles ours with pyinstrument (``pip install pyinstrument``; not a dependency of the
  harness) and writes the text and HTML reports to ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .round_trips import statements

OPS = ("put", "bulk_put", "get", "get_many", "query_page", "query_all")


def _short(sql: str, width: int = 110) -> str:
    sql = " ".join(sql.split())
    return sql if len(sql) <= width else sql[: width - 3] + "..."


def ops(
    bench: Any,
) -> dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[], Any]]]:
    """name -> (ours, raw, make one argument)."""
    from .data import writer_properties
    from .legs import get, query
    from .legs.get import random_ids

    counter = itertools.count()
    get_ours, get_raw = get.get_contenders(bench, 1)
    page_ours, page_raw, _ = query.page_contenders(bench, 1)
    all_ours, all_raw, _, _ = query.all_contenders(bench, 1, 1)
    from schemaless_store.models import Entity

    def many_ours(batch: list[Any]) -> None:
        for entity in Entity.objects.get_many([ids[0] for ids in batch]).values():
            entity["title"]

    def many_raw(batch: list[Any]) -> None:
        bench.raw.get_many([ids[1] for ids in batch])

    return {
        "put": (
            lambda props: Entity.objects.create(**props),
            bench.raw.put,
            lambda: writer_properties(next(counter), "profile"),
        ),
        "bulk_put": (
            lambda batch: Entity.objects.bulk_put(batch),
            bench.raw.put_batch,
            lambda: [writer_properties(next(counter), "profile") for _ in range(500)],
        ),
        "get": (get_ours.op, get_raw.op, lambda: random_ids(bench, 1)[0]),
        "get_many": (many_ours, many_raw, lambda: random_ids(bench, 100)),
        "query_page": (page_ours.op, page_raw.op, bench.random_user),
        "query_all": (all_ours.op, all_raw.op, bench.random_user),
    }


def measure(
    ours: Callable[[Any], Any], raw: Callable[[Any], Any], make_arg: Callable[[], Any], n: int
) -> dict[str, dict[str, float]]:
    """Wall and client CPU time per op (us), best of 5 alternating runs: CPU time is this
    process's own work (Python, the client library), the rest of the wall time is waiting for
    the servers (round trips, their work) or for the machine's other processes."""
    best: dict[str, dict[str, float]] = {
        "ours": {"wall": math.inf, "cpu": math.inf},
        "raw": {"wall": math.inf, "cpu": math.inf},
    }
    for _ in range(5):
        for label, op in (("ours", ours), ("raw", raw)):
            arguments = [make_arg() for _ in range(n)]
            wall, cpu = time.perf_counter(), time.process_time()
            for arg in arguments:
                op(arg)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            best[label]["wall"] = min(best[label]["wall"], wall / n * 1e6)
            best[label]["cpu"] = min(best[label]["cpu"], cpu / n * 1e6)
    return best


def _per_call(fn: Callable[[], Any], n: int = 2000, reps: int = 7) -> float:
    """Client CPU time of one call in us (best of ``reps`` loops of ``n``): CPU time, not wall,
    so that other processes on the machine do not count."""
    best = math.inf
    for _ in range(reps):
        start = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - start)
    return best / n * 1e6


def components(bench: Any) -> list[tuple[str, str, float]]:
    """The unit costs of ours and raw's paths, measured one by one: (unit, what, us)."""
    import uuid

    from django.db import connections, transaction

    from schemaless_store.config import conf
    from schemaless_store.config.indexes import registry
    from schemaless_store.models import Entity
    from schemaless_store.models.entity import ROW_FIELDS
    from schemaless_store.query import fetch
    from schemaless_store.topology import bucket_map, shards
    from schemaless_store.values import index_values
    from schemaless_store.values.codec import decode_body
    from schemaless_store.writes import entity_writes

    from .data import entity_id, writer_properties

    codec = conf.get().codec
    raw_id = entity_id(bench.random_entity())
    alias = bucket_map.alias_for(raw_id)
    conn = connections[alias]
    conn.ensure_connection()
    driver = conn.connection
    select = "SELECT added_id, id, updated, body FROM entities WHERE id IN (%s)"

    def driver_read() -> Any:
        cursor = driver.cursor()
        cursor.execute(select, [raw_id])
        rows = cursor.fetchall()
        cursor.close()
        return rows

    def django_read() -> Any:
        with conn.cursor() as cursor:
            cursor.execute(select, [raw_id])
            return cursor.fetchall()

    row = driver_read()[0]
    entity = Entity.from_db(alias, ROW_FIELDS, row)
    props = entity.body_properties()
    user = props["user_id"]
    query = Entity.objects.filter_index(user_id=user).order_by("-published")[:30]
    index = registry.get("index_user_published")
    index_row = (*sorted(index.rows_for(props))[0], raw_id)

    def fresh_properties() -> Any:
        e = Entity.from_db(alias, ROW_FIELDS, row)
        return e.body_properties()

    def empty_atomic() -> None:
        with transaction.atomic(using=alias):
            pass

    raw_conn = bench.raw.entity_conns[alias]

    def raw_begin_commit() -> None:
        raw_conn.cursor().execute("BEGIN")
        raw_conn.commit()

    fetch_one_ours = _per_call(lambda: fetch.fetch_by_ids(Entity, [raw_id]), n=500)
    write_props = writer_properties(0, "components")
    return [
        (
            "statement",
            "driver cursor: SELECT by id, fetchall (raw's way)",
            _per_call(driver_read, 500),
        ),
        (
            "statement",
            "Django cursor: same SELECT (conn.cursor(), 2 wrappers)",
            _per_call(django_read, 500),
        ),
        (
            "statement",
            "shards.read: same SELECT",
            _per_call(lambda: shards.read(alias, select, [raw_id]), 500),
        ),
        ("call", "query.fetch_by_ids([one id]) (SELECT + Entity)", fetch_one_ours),
        (
            "transaction",
            "Django atomic(), empty: SET autocommit=0, COMMIT, SET autocommit=1",
            _per_call(empty_atomic, 300),
        ),
        ("transaction", "raw BEGIN + COMMIT", _per_call(raw_begin_commit, 300)),
        (
            "entity",
            "decode_body (msgpack, raw does it too)",
            _per_call(lambda: decode_body(row[3])),
        ),
        (
            "entity",
            "Entity.from_db (Model.__init__)",
            _per_call(lambda: Entity.from_db(alias, ROW_FIELDS, row)),
        ),
        (
            "entity",
            "Entity.from_db + body_properties() (decode, function-level import)",
            _per_call(fresh_properties),
        ),
        (
            "entity",
            "convert_datetimefield_value (make_aware)",
            _per_call(lambda: conn.ops.convert_datetimefield_value(row[2], None, conn)),
        ),
        (
            "entity",
            "bucket_map.alias_for(id) (blake2b; raw does it too)",
            _per_call(lambda: bucket_map.alias_for(raw_id)),
        ),
        (
            "entity",
            "uuid.UUID(bytes=id) (get_many's result keys)",
            _per_call(lambda: uuid.UUID(bytes=raw_id)),
        ),
        (
            "entity",
            "re-check: index.implies + the conditions (decoded entity)",
            _per_call(
                lambda: (
                    index.implies(entity.body_properties(), index_row, {})
                    and query.bound.meets(index_row)
                )
            ),
        ),
        (
            "entity",
            "  of which index.rows_for(props) (encodes user_id again)",
            _per_call(lambda: index.rows_for(props)),
        ),
        (
            "entity",
            "  of which the conditions (ColumnConditions.meets)",
            _per_call(lambda: query.bound.meets(index_row[:-1])),
        ),
        (
            "query",
            "filter_index(...).order_by(...)[:30], not evaluated",
            _per_call(
                lambda: Entity.objects.filter_index(user_id=user).order_by("-published")[:30], 500
            ),
        ),
        (
            "put",
            "writes.entity_writes.prepare (validate, encode body, index rows)",
            _per_call(lambda: entity_writes.prepare(Entity(**write_props)), 500),
        ),
        ("put", "Entity(**properties)", _per_call(lambda: Entity(**write_props), 500)),
        (
            "put",
            "raw's equivalent of prepare: codec.encode + index_values.encode_key",
            _per_call(
                lambda: (
                    codec.encode(write_props),
                    index_values.encode_key(write_props["user_id"]),
                ),
                500,
            ),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--n", type=int, default=0, help="ops to profile (default: ~3 s worth)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/profiles"))
    args = parser.parse_args(argv)
    from pyinstrument import Profiler

    from . import plan as plans
    from .data import stages
    from .load import load_stage
    from .run import setup

    bench = setup(plans.choose(quick=args.entities < 10_000, sizes=[args.entities]))
    for stage in stages([args.entities]):
        load_stage(bench, stage)
    args.out.mkdir(parents=True, exist_ok=True)
    print("\n| unit | what | client CPU us |\n|---|---|---:|")
    for unit, what, cost in components(bench):
        print(f"| {unit} | {what} | {cost:,.1f} |")
    table = ops(bench)
    for name in args.ops.split(","):
        ours, raw, make_arg = table[name]
        for op in (ours, raw):  # warm up connections and caches
            for _ in range(20 if name != "bulk_put" else 2):
                op(make_arg())
        with statements() as sent_ours:
            ours(make_arg())
        with statements() as sent_raw:
            raw(make_arg())
        n = args.n or (10 if name == "bulk_put" else 100 if name == "get_many" else 1000)
        cost = measure(ours, raw, make_arg, n)
        arguments = [make_arg() for _ in range(n)]
        profiler = Profiler(interval=0.0005)
        profiler.start()
        for arg in arguments:
            ours(arg)
        profiler.stop()
        (args.out / f"{name}.txt").write_text(
            profiler.output_text(unicode=False, color=False, show_all=True)
        )
        (args.out / f"{name}.html").write_text(profiler.output_html())
        o, r = cost["ours"], cost["raw"]
        print(f"\n== {name} at {bench.size:,}, per op (best of 5 alternating runs of {n}):")
        for label, key in (("wall", "wall"), ("client CPU", "cpu")):
            print(
                f"   {label:11s} ours {o[key]:8,.0f} us   raw {r[key]:8,.0f} us   "
                f"(ours +{o[key] - r[key]:,.0f} us)"
            )
        print(
            f"   waiting     ours {o['wall'] - o['cpu']:8,.0f} us   "
            f"raw {r['wall'] - r['cpu']:8,.0f} us   "
            f"(ours/raw throughput {r['wall'] / o['wall']:.2f}x)"
        )
        print(f"   round trips: ours {len(sent_ours)}, raw {len(sent_raw)}")
        for sql in sent_ours:
            print(f"     ours: {_short(sql)}")
        for sql in sent_raw:
            print(f"     raw:  {_short(sql)}")
        print(f"   profile: {args.out / name}.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
