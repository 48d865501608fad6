"""``python -m bench.replicas --entities 20000``: what read replicas and Galera cost (issue 19).

On this 2-core machine extra servers add no CPU, so no throughput can be gained here: the leg
reports costs instead, each as a comparison in alternating rounds (``bench.stats``):

- **replica_get**: ``Entity.objects.get`` served by a GTID replica with read-your-writes (the
  thread holds a position on the shard that the replica has applied, as after its own earlier
  write) against the same read on the primary;
- **replica_write**: ``Entity.objects.create`` on a store whose shards have replicas (the write
  then reads its GTID, ``SELECT @@last_gtid``) against the same store told it has none;
- **galera_commit**: one ``INSERT`` and ``COMMIT`` with mysqlclient through a node of a 3-node
  Galera cluster (certification and replication to the two others before the commit returns)
  against the same on a single server. The store's own write adds the same client work on both.

Servers: shard_0 (and the metadata) on a first server, shard_1 on a second, both with GTID
binary logs and one replica each; a Galera cluster of three nodes. Writes
``replicas-<time>.json`` and ``.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from .stats import Contender, compare, result


def start() -> tuple[list[Any], list[Any], Any]:
    import MySQLdb

    from schemaless_store.testing.galera import start_galera_cluster
    from schemaless_store.testing.mariadb import start_servers
    from schemaless_store.testing.replication import start_replica

    servers = start_servers(2, buffer_pool="256M", binlog=True)
    for server, names in zip(
        servers, (["meta", "shard0", "peer"], ["shard1", "bench"]), strict=True
    ):
        conn = MySQLdb.connect(host="127.0.0.1", port=server.port, user="root")
        for name in names:
            conn.cursor().execute(
                f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
        conn.close()
    replicas = [start_replica(server) for server in servers]
    cluster = start_galera_cluster(3)
    cluster.nodes[0].query("CREATE DATABASE bench CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    first, second = servers
    os.environ["BENCH_META_URL"] = first.url("meta")
    os.environ["BENCH_SHARD_URLS"] = f"{first.url('shard0')},{second.url('shard1')}"
    os.environ["BENCH_PEER_URL"] = first.url("peer")
    os.environ["BENCH_REPLICA_URLS"] = ",".join(
        f"shard_{n}={replica.url(f'shard{n}', connect_timeout='1')}"
        for n, replica in enumerate(replicas)
    )
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    return servers, replicas, cluster


def commit_contender(name: str, host_port: tuple[str, int], ops: int) -> Contender:
    import MySQLdb

    host, port = host_port
    conn = MySQLdb.connect(host=host, port=port, user="root", database="bench", autocommit=False)
    cursor = conn.cursor()
    cursor.execute(
        "CREATE TABLE IF NOT EXISTS t (id BINARY(16) PRIMARY KEY, body BLOB) ENGINE=InnoDB"
    )
    conn.commit()

    def insert(body: bytes) -> None:
        cursor.execute("INSERT INTO t VALUES (%s, %s)", (uuid.uuid4().bytes, body))
        conn.commit()

    return Contender(name, insert, ops)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.replicas", description=__doc__)
    parser.add_argument("--entities", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=500, help="ops per contender and round")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    servers, replica_servers, cluster = start()

    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    django.setup()
    call_command("migrateall", verbosity=0)
    from schemaless_store.models import Entity
    from schemaless_store.topology import replicas

    from .data import Stage

    stage = Stage(0, args.entities)
    for chunk in stage.chunks(2000):
        Entity.objects.bulk_put(chunk, batch_size=2000)
    for replica in replica_servers:
        replica.wait_caught_up()
    ids = [uuid.UUID(bytes=stage.properties(i)["id"]) for i in range(args.entities)]
    import random

    rng = random.Random(7)
    # A position on every shard that the replicas have applied: as after this thread's writes.
    from schemaless_store.topology import bucket_map

    for alias in ("shard_0", "shard_1"):
        on_it = next(i for i in iter(uuid.uuid4, None) if bucket_map.alias_for(i.bytes) == alias)
        Entity.objects.create(id=on_it, n=alias)
    for replica in replica_servers:
        replica.wait_caught_up()
    print(f"bench: positions {dict(replicas.positions())}", flush=True)

    def get(entity_id: uuid.UUID) -> None:
        Entity.objects.get(id=entity_id)["title"]

    def get_from_replica(entity_id: uuid.UUID) -> None:
        with replicas.from_replicas():
            Entity.objects.get(id=entity_id)["title"]

    records = []
    timings = compare(
        [
            Contender("replica", get_from_replica, args.ops),
            Contender("primary", get, args.ops),
        ],
        lambda _r, n: [rng.choice(ids) for _ in range(n)],
        args.rounds,
    )
    served = replicas.health("shard_0_replica_0")
    records.append(
        result(
            timings,
            [("replica", "primary")],
            leg="replica_get",
            size=args.entities,
            what="get(id) from a GTID replica with read-your-writes (the thread's positions "
            "applied) vs from the primary",
            replica_state=served.state,
        )
    )
    counter = iter(range(10**9))

    def create(_arg: Any) -> None:
        Entity.objects.create(user_id=next(counter), title="w")

    without = {**settings.SCHEMALESS, "REPLICAS": {}}
    timings = compare(
        [
            Contender("with_replicas", create, args.ops),
            Contender(
                "without", create, args.ops, around=lambda: override_settings(SCHEMALESS=without)
            ),
        ],
        lambda _r, n: [None] * n,
        args.rounds,
    )
    records.append(
        result(
            timings,
            [("with_replicas", "without")],
            leg="replica_write",
            size=args.entities,
            what="create() on shards with replicas (reads its GTID after the commit) vs the "
            "same store told it has none",
        )
    )
    body = os.urandom(400)
    timings = compare(
        [
            commit_contender("galera", ("127.0.0.1", cluster.nodes[0].port), args.ops),
            commit_contender("single", ("127.0.0.1", servers[1].port), args.ops),
        ],
        lambda _r, n: [body] * n,
        args.rounds,
    )
    records.append(
        result(
            timings,
            [("galera", "single")],
            leg="galera_commit",
            size=0,
            what="INSERT + COMMIT of one 400-byte row through a node of a 3-node Galera cluster "
            "vs a single server (mysqlclient)",
        )
    )
    run = {
        "mode": "replicas",
        "command": "python -m bench.replicas " + " ".join(argv or sys.argv[1:]),
        "started": started.isoformat().replace("+00:00", "Z"),
        "comparisons": records,
    }
    from .report import comparisons_table

    stem = f"replicas-{run['started'].replace(':', '').replace('-', '')}"
    args.out.mkdir(parents=True, exist_ok=True)
    import json

    (args.out / f"{stem}.json").write_text(json.dumps(run, indent=2, default=str) + "\n")
    text = "\n".join(
        [
            f"# Replicas and Galera, {run['started']}",
            "",
            f"Command: `{run['command']}`. Ratios are medians over rounds of A/B.",
            "",
            *comparisons_table(records),
            "",
        ]
    )
    (args.out / f"{stem}.md").write_text(text)
    print(text)
    cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
