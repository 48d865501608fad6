"""``python -m bench.page_split``: where a placed page's time goes, next to the JSON column's.

    .venv/bin/python -m bench.page_split --entities 100000

One throwaway MariaDB server holds three tables built like the benchmark's: the store's index
table (``user_id, published, entity_id``, clustered by all three), its ``entities`` clustered by
``id`` (bodies encoded by the store's codec), and the peer's JSON table with its index on
``(user_id, published)``. Users' entities are adjacent, as placed entities are. For a user's page
of 30 it times, alternating, each part apart:

- ``join``: the store's one statement (index rows joined to ``entities``), rows fetched only;
- ``two_statements``: the index rows, then ``entities`` by primary key (``id IN (...)``);
- ``json``: the peer's statement, rows fetched only;
- ``decode_store`` / ``decode_json``: decoding 30 bodies (the store's codec / ``json.loads``).

Prints medians in microseconds. Nothing of the store's Python runs but its codec.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from typing import Any

from schemaless_store.testing.mariadb import start_servers
from schemaless_store.values.codec import MsgpackCodec, decode_body
from schemaless_store.values.entity_ids import new_id

PAGE = 30
PER_USER = 100

JOIN = (
    "SELECT i.published, e.added_id, e.id, e.updated, e.body FROM idx i "
    "JOIN entities e ON e.id = i.entity_id WHERE i.user_id = %s "
    "ORDER BY i.published DESC LIMIT %s"
)
INDEX_ROWS = (
    "SELECT published, entity_id FROM idx WHERE user_id = %s ORDER BY published DESC LIMIT %s"
)
JSON_PAGE = (
    "SELECT added_id, id, updated, body FROM js WHERE user_id = %s ORDER BY published DESC LIMIT %s"
)


def properties(n: int, user: int) -> dict[str, Any]:
    return {
        "user_id": user,
        "published": 1_600_000_000 + 7 * n,
        "title": f"Post number {n}",
        "link": f"https://example.com/{user}/{n}",
        "text": "Lorem ipsum dolor sit amet, consectetur adipiscing elit. " * 6 + str(n),
    }


def load(conn: Any, entities: int) -> None:
    cursor = conn.cursor()
    cursor.execute(
        "CREATE TABLE idx (user_id BIGINT NOT NULL, published BIGINT NOT NULL, "
        "entity_id BINARY(16) NOT NULL, PRIMARY KEY (user_id, published, entity_id)) ENGINE=InnoDB"
    )
    cursor.execute(
        "CREATE TABLE entities (added_id BIGINT NOT NULL AUTO_INCREMENT, id BINARY(16) NOT NULL, "
        "updated DATETIME(6) NOT NULL, body MEDIUMBLOB NOT NULL, PRIMARY KEY (id), "
        "UNIQUE KEY (added_id)) ENGINE=InnoDB"
    )
    cursor.execute(
        "CREATE TABLE js (added_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "id BINARY(16) NOT NULL UNIQUE, updated DATETIME(6) NOT NULL, body JSON NOT NULL, "
        "user_id BIGINT AS (JSON_VALUE(body, '$.user_id')) VIRTUAL, "
        "published BIGINT AS (JSON_VALUE(body, '$.published')) VIRTUAL, "
        "KEY (user_id, published)) ENGINE=InnoDB"
    )
    codec = MsgpackCodec()
    batch_i, batch_e, batch_j = [], [], []
    for n in range(entities):
        user = n // PER_USER
        props = properties(n, user)
        entity_id = new_id()
        batch_i.append((user, props["published"], entity_id))
        batch_e.append((entity_id, codec.encode(props)))
        batch_j.append((entity_id, json.dumps(props)))
        if len(batch_e) == 2000 or n == entities - 1:
            cursor.executemany("INSERT INTO idx VALUES (%s, %s, %s)", batch_i)
            cursor.executemany(
                "INSERT INTO entities (id, updated, body) VALUES (%s, UTC_TIMESTAMP(6), %s)",
                batch_e,
            )
            cursor.executemany(
                "INSERT INTO js (id, updated, body) VALUES (%s, UTC_TIMESTAMP(6), %s)", batch_j
            )
            conn.commit()
            batch_i, batch_e, batch_j = [], [], []


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.page_split")
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    (server,) = start_servers(1, buffer_pool="1G")
    admin = server.connect()
    admin.cursor().execute("CREATE DATABASE split")
    conn = server.connect("split")
    conn.autocommit(False)
    started = time.perf_counter()
    load(conn, args.entities)
    conn.autocommit(True)
    print(f"loaded {args.entities:,} entities in {time.perf_counter() - started:.0f} s")
    cursor = conn.cursor()
    users = args.entities // PER_USER

    def join(user: int) -> list[Any]:
        cursor.execute(JOIN, (user, PAGE))
        return cursor.fetchall()

    def two_statements(user: int) -> list[Any]:
        cursor.execute(INDEX_ROWS, (user, PAGE))
        ids = [row[1] for row in cursor.fetchall()]
        marks = ", ".join(["%s"] * len(ids))
        cursor.execute(
            f"SELECT added_id, id, updated, body FROM entities WHERE id IN ({marks})", ids
        )
        return cursor.fetchall()

    def json_page(user: int) -> list[Any]:
        cursor.execute(JSON_PAGE, (user, PAGE))
        return cursor.fetchall()

    sample_user = users // 2
    store_bodies = [row[4] for row in join(sample_user)]
    json_bodies = [row[3] for row in json_page(sample_user)]

    def decode_store(_user: int) -> list[Any]:
        return [decode_body(body) for body in store_bodies]

    def decode_json(_user: int) -> list[Any]:
        return [json.loads(body) for body in json_bodies]

    parts = {
        "join": join,
        "two_statements": two_statements,
        "json": json_page,
        "decode_store": decode_store,
        "decode_json": decode_json,
    }
    times: dict[str, list[float]] = {name: [] for name in parts}
    rng = random.Random(27)
    for _ in range(args.rounds):
        user = rng.randrange(users)
        for name in rng.sample(list(parts), len(parts)):
            t0 = time.perf_counter()
            parts[name](user)
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["json"])
    print(f"{'part':<16} {'median us':>10} {'/ json statement':>17}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<16} {median * 1e6:>10.1f} {median / base:>16.2f}x")
    print(
        f"body bytes: store {statistics.mean(map(len, store_bodies)):.0f}, "
        f"json {statistics.mean(map(len, json_bodies)):.0f}; pid {os.getpid()}"
    )


if __name__ == "__main__":
    main()
