"""What a body the server could change itself would cost (issue 35, item 3).

The store's body is MessagePack with typed extensions, zlib-compressed from 512 bytes on
(``schemaless_store/values/codec.py``): the server cannot read it, so changing one property is a
read,
a decode, an encode and a write of the whole body. MariaDB's ``JSON_SET`` changes one path of a
JSON document in one statement. This leg measures, on one throwaway MariaDB server, in one run,
what storing bodies as JSON text would cost and save, before anything stored is changed:

- bytes per record and the table's InnoDB size after loading ``--records`` records;
- a read by id and its decode (``codec.decode_body`` against ``json.loads`` with the typed
  values untagged, which JSON would need: datetimes and UUIDs have no JSON type);
- an update of one property: the store's way for the msgpack body (``BEGIN; SELECT ... FOR
  UPDATE``, decode, set, encode, ``UPDATE ...; COMMIT``: the two round trips a write that needs
  no index or history work still makes), against one autocommitted ``UPDATE ... JSON_SET``
  for the JSON body.

Two record shapes: YCSB's (ten fields of 100 random printable bytes, which compress poorly) and
the demo's entries (short strings, prose, a datetime, a UUID, tags, a counter). Operations
alternate between the two tables in rounds, so a burst of load hits both alike.

    .venv/bin/python -m bench.body_format [--records 5000] [--ops 2000] [--rounds 3]

Writes ``bench/results/body-format-<time>.json`` and ``.md``; docs/performance.md reads it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schemaless_store.values.codec import MsgpackCodec, decode_body

from .stats import percentile
from .ycsb.clients import FIELD_NAMES
from .ycsb.workloads import field_value

RESULTS = Path(__file__).resolve().parent / "results"
SENTENCE = (
    "the store keeps every property bag in one row and an index table per query shape so a "
    "page reads one index range then the entities by id and checks each against the filter"
)
WORDS = SENTENCE.split()
TABLES = {
    "msgpack": "CREATE TABLE bodies_msgpack (id BINARY(16) NOT NULL PRIMARY KEY, "
    "body MEDIUMBLOB NOT NULL) ENGINE=InnoDB",
    "json": "CREATE TABLE bodies_json (id BINARY(16) NOT NULL PRIMARY KEY, "
    "body JSON NOT NULL) ENGINE=InnoDB",
}


def ycsb_record(rng: random.Random, number: int) -> dict[str, Any]:
    record: dict[str, Any] = {"ns": "s", "ykey": f"user{number}"}
    record.update((name, field_value(rng)) for name in FIELD_NAMES)
    return record


def entry_record(rng: random.Random, number: int) -> dict[str, Any]:
    prose = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 90)))
    return {
        "kind": "entry",
        "user_id": f"user{rng.randrange(1000)}",
        "title": " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))),
        "body": prose,
        "link": f"https://example.com/{number}",
        "published": dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=number),
        "source_id": uuid.UUID(int=rng.getrandbits(128)),
        "tags": rng.sample(WORDS, 3),
        "likes": rng.randrange(100),
    }


SHAPES: dict[str, Callable[[random.Random, int], dict[str, Any]]] = {
    "ycsb": ycsb_record,
    "entry": entry_record,
}
UPDATED = {"ycsb": "field3", "entry": "title"}


def _tag(value: Any) -> Any:
    """JSON has no datetime or UUID: a JSON body would carry them tagged, as here."""
    if isinstance(value, dt.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    return value


def _untag(value: dict[str, Any]) -> Any:
    if "$dt" in value:
        return dt.datetime.fromisoformat(value["$dt"])
    if "$uuid" in value:
        return uuid.UUID(value["$uuid"])
    return value


def to_json(properties: dict[str, Any]) -> str:
    return json.dumps({key: _tag(value) for key, value in properties.items()})


def from_json(text: str) -> dict[str, Any]:
    return json.loads(text, object_hook=_untag)


class Tables:
    """The two tables on one server, with one autocommitting connection."""

    def __init__(self, server: Any) -> None:
        import MySQLdb
        from MySQLdb.constants import CLIENT

        conn = MySQLdb.connect(
            host=server.host,
            port=server.port,
            user="root",
            client_flag=CLIENT.MULTI_STATEMENTS | CLIENT.MULTI_RESULTS,
        )
        conn.cursor().execute("CREATE DATABASE bodies")
        conn.select_db("bodies")
        conn.autocommit(True)
        self.conn = conn
        self.cursor = conn.cursor()
        self.codec = MsgpackCodec()

    def reset(self) -> None:
        for name, create in TABLES.items():
            self.cursor.execute(f"DROP TABLE IF EXISTS bodies_{name}")
            self.cursor.execute(create)

    def load(self, records: list[tuple[bytes, dict[str, Any]]]) -> None:
        for start in range(0, len(records), 500):
            chunk = records[start : start + 500]
            self.cursor.executemany(
                "INSERT INTO bodies_msgpack (id, body) VALUES (%s, %s)",
                [(key, self.codec.encode(props)) for key, props in chunk],
            )
            self.cursor.executemany(
                "INSERT INTO bodies_json (id, body) VALUES (%s, %s)",
                [(key, to_json(props)) for key, props in chunk],
            )

    def sizes(self) -> dict[str, int]:
        self.cursor.execute("ANALYZE TABLE bodies_msgpack, bodies_json")
        self.cursor.fetchall()
        self.cursor.execute(
            "SELECT table_name, data_length FROM information_schema.tables "
            "WHERE table_schema = 'bodies'"
        )
        return {name.removeprefix("bodies_"): int(size) for name, size in self.cursor.fetchall()}

    def read_msgpack(self, key: bytes) -> dict[str, Any]:
        self.cursor.execute("SELECT body FROM bodies_msgpack WHERE id = %s", (key,))
        return decode_body(self.cursor.fetchone()[0])

    def read_json(self, key: bytes) -> dict[str, Any]:
        self.cursor.execute("SELECT body FROM bodies_json WHERE id = %s", (key,))
        return from_json(self.cursor.fetchone()[0])

    def update_msgpack(self, key: bytes, name: str, value: Any) -> None:
        """The store's way (docs/design.md#round-trips), minus the index, history and receipt
        work a plain property does not need: ``BEGIN`` with the locking read, then the
        ``UPDATE`` with the ``COMMIT``: two round trips, the body decoded and encoded between."""
        cursor = self.cursor
        cursor.execute("BEGIN; SELECT body FROM bodies_msgpack WHERE id = %s FOR UPDATE", (key,))
        cursor.nextset()
        properties = decode_body(cursor.fetchone()[0])
        properties[name] = value
        cursor.execute(
            "UPDATE bodies_msgpack SET body = %s WHERE id = %s; COMMIT",
            (self.codec.encode(properties), key),
        )
        while cursor.nextset():
            pass

    def update_json(self, key: bytes, name: str, value: Any) -> None:
        self.cursor.execute(
            "UPDATE bodies_json SET body = JSON_SET(body, %s, %s) WHERE id = %s",
            (f"$.{name}", value, key),
        )


def run_shape(tables: Tables, shape: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    make = SHAPES[shape]
    records = [
        (uuid.UUID(int=rng.getrandbits(128)).bytes, make(rng, n)) for n in range(args.records)
    ]
    tables.reset()
    tables.load(records)
    msgpack_bytes = [len(tables.codec.encode(props)) for _key, props in records]
    json_bytes = [len(to_json(props).encode()) for _key, props in records]
    sizes = tables.sizes()
    # Both decodes give back the same properties, or the comparison is void.
    for key, props in records[:20]:
        assert tables.read_msgpack(key) == props == tables.read_json(key), shape
    name = UPDATED[shape]
    lat: dict[str, list[float]] = {f"{op}_{fmt}": [] for op in ("read", "update") for fmt in TABLES}
    for number in range(args.rounds):
        keys = [rng.choice(records)[0] for _ in range(args.ops)]
        values = [make(rng, 0)[name] for _ in range(args.ops)]
        order = ["msgpack", "json"] if number % 2 == 0 else ["json", "msgpack"]
        for fmt in order:
            read = getattr(tables, f"read_{fmt}")
            update = getattr(tables, f"update_{fmt}")
            for key in keys:
                start = time.perf_counter()
                read(key)
                lat[f"read_{fmt}"].append(time.perf_counter() - start)
            for key, value in zip(keys, values, strict=True):
                start = time.perf_counter()
                update(key, name, value)
                lat[f"update_{fmt}"].append(time.perf_counter() - start)
    updated_key = keys[-1]
    assert tables.read_msgpack(updated_key)[name] == tables.read_json(updated_key)[name]
    p50 = {op: percentile(values, 50) * 1000 for op, values in lat.items()}
    return {
        "records": args.records,
        "bytes_per_record": {
            "msgpack": sum(msgpack_bytes) / len(records),
            "json": sum(json_bytes) / len(records),
        },
        "innodb_data_length": sizes,
        "p50_ms": p50,
        "p99_ms": {op: percentile(values, 99) * 1000 for op, values in lat.items()},
        "json_over_msgpack": {
            "bytes": sum(json_bytes) / sum(msgpack_bytes),
            "innodb": sizes["json"] / sizes["msgpack"],
            "read_p50": p50["read_json"] / p50["read_msgpack"],
            "update_p50": p50["update_json"] / p50["update_msgpack"],
        },
    }


def markdown(run: dict[str, Any]) -> str:
    lines = [
        f"# Body format: msgpack+zlib against JSON ({run['started']})",
        "",
        f"Load average at start {run['load'][0]:.2f}, at end {run['load_end'][0]:.2f}; "
        f"{run['rounds']} rounds of {run['ops']} reads and updates per format.",
        "",
        "| shape | bytes/record msgpack | JSON | InnoDB size JSON/msgpack | read p50 msgpack | "
        "JSON | update p50 msgpack (store's way) | JSON_SET |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, result in run["shapes"].items():
        size, p50 = result["bytes_per_record"], result["p50_ms"]
        ratio = result["json_over_msgpack"]
        lines.append(
            f"| {shape} | {size['msgpack']:.0f} | {size['json']:.0f} | {ratio['innodb']:.2f} | "
            f"{p50['read_msgpack']:.3f} ms | {p50['read_json']:.3f} ms | "
            f"{p50['update_msgpack']:.3f} ms | {p50['update_json']:.3f} ms |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from schemaless_store.testing.mariadb import start_servers

    parser = argparse.ArgumentParser(prog="python -m bench.body_format", description=__doc__)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    load = os.getloadavg()
    (server,) = start_servers(1, buffer_pool="256M")
    tables = Tables(server)
    shapes = {}
    for shape in SHAPES:
        print(f"body_format: {shape}: {args.records} records, {args.rounds} rounds", flush=True)
        shapes[shape] = run_shape(tables, shape, args)
    run = {
        "started": started,
        "load": load,
        "load_end": os.getloadavg(),
        "records": args.records,
        "ops": args.ops,
        "rounds": args.rounds,
        "shapes": shapes,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"body-format-{started}"
    stem.with_suffix(".json").write_text(json.dumps(run, indent=2, default=str) + "\n")
    stem.with_suffix(".md").write_text(markdown(run))
    print(markdown(run))
    print(f"body_format: wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
