"""The store's two body codecs against each other (issue 45, item 1): MessagePack with zlib from
512 bytes (``MsgpackCodec``, the default) and the JSON body MariaDB's JSON functions read
(``JsonCodec``, ``schemaless_store/values/jsonbody.py``), on YCSB's records (ten fields of 100
random printable bytes) and the demo's entries (short strings, prose, a datetime, a UUID, tags, a
counter), the shapes of ``bench/body_format.py``.

In one run, for each shape and codec:

- bytes per body, as the store writes it (format byte included);
- CPU per body: ``codec.encode`` and ``decode_body``, the best of ``--repeats`` passes over every
  record (this process only: no server, no driver);
- on one throwaway MariaDB server, the table's size after loading ``--records`` bodies into
  ``entities``-like tables (``id BINARY(16)``, ``body MEDIUMBLOB``), without and with InnoDB page
  compression (``PAGE_COMPRESSED=1``, zlib): the ``.ibd`` file's allocated bytes once its pages
  are flushed (page compression punches holes, which ``data_length`` does not show);
- a read by id and its decode, p50 over ``--ops`` reads alternating between the codecs;
- for the JSON tables, one full scan of ``JSON_VALUE`` over every body (what a server-side
  backfill reads), which the MessagePack tables cannot answer at all.

    .venv/bin/python -m bench.body_codec [--records 20000] [--ops 2000] [--repeats 5]

Writes ``bench/results/body-codec-<time>.json`` and ``.md``; docs/performance.md reads it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

from schemaless_store.values.codec import JsonCodec, MsgpackCodec, decode_body

from .body_format import SHAPES
from .stats import percentile

RESULTS = Path(__file__).resolve().parent / "results"
CODECS = {"msgpack": MsgpackCodec(), "json": JsonCodec()}
COMPRESSION = {"plain": "", "page_compressed": " PAGE_COMPRESSED=1"}
SCANNED = {"ycsb": "ykey", "entry": "user_id"}
# schemaless_store.tables.entities.JSON_BODY (not imported: that module needs Django set up).
JSON_BODY = "IF(LEFT(body, 1) = x'03', CONVERT(SUBSTRING(body, 2) USING utf8mb4), NULL)"


def cpu(records: list[dict[str, Any]], repeats: int) -> dict[str, dict[str, float]]:
    """Microseconds per record to encode and to decode, and bytes per body, for each codec."""
    result = {}
    for name, codec in CODECS.items():
        bodies = [codec.encode(props) for props in records]
        for props, body in zip(records[:50], bodies[:50], strict=True):
            assert decode_body(body) == props, name  # the same properties, or it is void
        encode = decode = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for props in records:
                codec.encode(props)
            encode = min(encode, time.perf_counter() - start)
            start = time.perf_counter()
            for body in bodies:
                decode_body(body)
            decode = min(decode, time.perf_counter() - start)
        result[name] = {
            "bytes": sum(map(len, bodies)) / len(bodies),
            "encode_us": encode / len(records) * 1e6,
            "decode_us": decode / len(records) * 1e6,
        }
    return result


class Server:
    """The tables on one server, one autocommitting connection."""

    def __init__(self, server: Any) -> None:
        import MySQLdb

        self.server = server
        self.conn = MySQLdb.connect(host=server.host, port=server.port, user="root")
        self.conn.autocommit(True)
        self.cursor = self.conn.cursor()
        self.cursor.execute("CREATE DATABASE IF NOT EXISTS bodies")
        self.conn.select_db("bodies")

    def load(self, table: str, options: str, bodies: list[tuple[bytes, bytes]]) -> None:
        self.cursor.execute(f"DROP TABLE IF EXISTS {table}")
        self.cursor.execute(
            f"CREATE TABLE {table} (id BINARY(16) NOT NULL PRIMARY KEY, "
            f"body MEDIUMBLOB NOT NULL) ENGINE=InnoDB{options}"
        )
        for start in range(0, len(bodies), 500):
            self.cursor.executemany(
                f"INSERT INTO {table} (id, body) VALUES (%s, %s)", bodies[start : start + 500]
            )

    def allocated(self, table: str) -> dict[str, int]:
        """The pages in use (``data_length``), and the ``.ibd`` file's size and its allocated
        bytes once its pages are on disk (page compression shows only in the last)."""
        self.cursor.execute(f"ANALYZE TABLE {table}")
        self.cursor.fetchall()
        self.cursor.execute(
            "SELECT data_length FROM information_schema.tables "
            "WHERE table_schema = 'bodies' AND table_name = %s",
            (table,),
        )
        (data_length,) = self.cursor.fetchone()
        self.cursor.execute(f"FLUSH TABLES {table} FOR EXPORT")
        self.cursor.execute("UNLOCK TABLES")
        stat = (self.server.datadir / "bodies" / f"{table}.ibd").stat()
        return {
            "data_length": int(data_length),
            "file": stat.st_size,
            "allocated": stat.st_blocks * 512,
        }

    def read(self, table: str, key: bytes) -> dict[str, Any]:
        self.cursor.execute(f"SELECT body FROM {table} WHERE id = %s", (key,))
        return decode_body(self.cursor.fetchone()[0])

    def scan(self, table: str, name: str) -> float:
        start = time.perf_counter()
        self.cursor.execute(
            f"SELECT COUNT(*) FROM {table} WHERE JSON_VALUE({JSON_BODY}, '$.{name}') IS NOT NULL"
        )
        (count,) = self.cursor.fetchone()
        elapsed = time.perf_counter() - start
        assert count > 0, table
        return elapsed


def run_shape(db: Server, shape: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    make = SHAPES[shape]
    keys = [uuid.UUID(int=rng.getrandbits(128)).bytes for _ in range(args.records)]
    records = [make(rng, n) for n in range(args.records)]
    result: dict[str, Any] = {"cpu": cpu(records, args.repeats), "innodb": {}, "scan_s": {}}
    for name, codec in CODECS.items():
        bodies = [(key, codec.encode(props)) for key, props in zip(keys, records, strict=True)]
        for compression, options in COMPRESSION.items():
            table = f"{shape}_{name}_{compression}"
            db.load(table, options, bodies)
            result["innodb"][f"{name}/{compression}"] = db.allocated(table)
            if name == "json":
                result["scan_s"][compression] = db.scan(table, SCANNED[shape])
    lat: dict[str, list[float]] = {name: [] for name in CODECS}
    for number in range(args.ops):
        key = rng.choice(keys)
        order = list(CODECS) if number % 2 == 0 else list(reversed(CODECS))
        for name in order:
            start = time.perf_counter()
            db.read(f"{shape}_{name}_plain", key)
            lat[name].append(time.perf_counter() - start)
    result["read_p50_ms"] = {name: percentile(v, 50) * 1000 for name, v in lat.items()}
    result["read_p99_ms"] = {name: percentile(v, 99) * 1000 for name, v in lat.items()}
    return result


def markdown(run: dict[str, Any]) -> str:
    lines = [
        f"# Body codecs: msgpack+zlib against JSON ({run['started']})",
        "",
        f"{run['records']} records per shape; load average at start {run['load'][0]:.2f}, "
        f"at end {run['load_end'][0]:.2f}.",
        "",
        "| shape | codec | bytes/body | encode µs | decode µs | data_length MiB | .ibd on disk "
        "MiB | page-compressed on disk MiB | read+decode p50 ms | JSON_VALUE scan s "
        "(plain / page-compressed) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    mib = 1024 * 1024
    for shape, result in run["shapes"].items():
        for name in CODECS:
            c, inno = result["cpu"][name], result["innodb"]
            scan = (
                f"{result['scan_s']['plain']:.3f} / {result['scan_s']['page_compressed']:.3f}"
                if name == "json"
                else "(cannot)"
            )
            lines.append(
                f"| {shape} | {name} | {c['bytes']:.0f} | {c['encode_us']:.1f} | "
                f"{c['decode_us']:.1f} | {inno[f'{name}/plain']['data_length'] / mib:.2f} | "
                f"{inno[f'{name}/plain']['allocated'] / mib:.2f} | "
                f"{inno[f'{name}/page_compressed']['allocated'] / mib:.2f} | "
                f"{result['read_p50_ms'][name]:.3f} | {scan} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from schemaless_store.testing.mariadb import start_servers

    parser = argparse.ArgumentParser(prog="python -m bench.body_codec", description=__doc__)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    load = os.getloadavg()
    (server,) = start_servers(1, buffer_pool="256M")
    db = Server(server)
    shapes = {}
    for shape in SHAPES:
        print(f"body_codec: {shape}: {args.records} records", flush=True)
        shapes[shape] = run_shape(db, shape, args)
    run = {
        "started": started,
        "load": load,
        "load_end": os.getloadavg(),
        "records": args.records,
        "ops": args.ops,
        "shapes": shapes,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"body-codec-{started}"
    stem.with_suffix(".json").write_text(json.dumps(run, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(run))
    print(markdown(run))
    print(f"body_codec: wrote {stem}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
