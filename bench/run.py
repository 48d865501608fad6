"""``python -m bench.run``: the whole benchmark in one run, on its own two MariaDB servers.

    .venv/bin/python -m bench.run                # full: 10k, 100k, 1M entities (minutes)
    .venv/bin/python -m bench.run --quick        # smoke: a few thousand entities, all legs
    .venv/bin/python -m bench.run --legs get,query --sizes 10000,100000
    .venv/bin/python -m bench.run --entities 100000 --legs clients --servers 1
    .venv/bin/python -m bench.run --entities 10000 --legs netem   # ~0.25 ms network (root)
    .venv/bin/python -m bench.run --entities 100000 --placed --legs layout  # both layouts

Starts two throwaway ``mariadbd`` (metadata, shard_0 and the JSON peer on the first; shard_1 on
the second), migrates, grows the store through the sizes, runs the legs, and writes
``<out>/<mode>-<timestamp>.json`` and ``.md``. See ``docs/performance.md``.

``--legs netem`` (not in the default set) puts the servers in a network namespace of their own
behind a veth pair (:mod:`bench.netem`) and runs the comparisons again with ``--netem-ms`` of
round trip added by ``tc netem``; the machine's refusal is reported instead when it refuses.

``--servers 1`` gives every bucket to shard_0 (``BENCH_SHARD_MAP``), so the store lives on the
first server only (shard_1 holds nothing); the default, 2, splits the buckets between the two.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import plan as plans
from .data import stages

# ``--servers 1``: the store's two shards stay (shard_1 on the second server), with no buckets on
# shard_1, so every entity and index row is on the first server.
ONE_SERVER_MAP = '{"shard_0": "0-4095", "shard_1": []}'

MARIADB_DATABASES = {
    0: ("meta", "shard0", "peer", "importa0", "importb0"),
    1: ("shard1", "importa1", "importb1"),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: a few thousand entities")
    parser.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        help="store sizes to grow through (default 10000,100000,1000000; quick 1000,3000)",
    )
    parser.add_argument(
        "--entities", type=int, help="one size only: the same as --sizes N --main-size N"
    )
    parser.add_argument(
        "--main-size",
        type=int,
        help="the size where put/get/query legs run (default 100000, or the largest size)",
    )
    parser.add_argument(
        "--legs",
        type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
        default=list(plans.DEFAULT_LEGS),
        help=f"comma-separated subset of {','.join(plans.LEGS)} "
        "(default: all but netem and layout)",
    )
    parser.add_argument(
        "--netem-ms",
        type=float,
        default=0.25,
        help="the netem leg's added round trip in ms, half on each end (default 0.25; 0: the "
        "veth pair without delay)",
    )
    parser.add_argument("--rounds", type=int, help="alternating rounds per comparison")
    parser.add_argument(
        "--placed",
        action="store_true",
        help="the store's entities placed with their user_id (docs/placement.md); the query "
        "legs are reported as query_page_placed and query_all_placed",
    )
    parser.add_argument(
        "--servers",
        type=int,
        choices=(1, 2),
        default=2,
        help="shard servers the store's buckets are on (default 2; 1: every bucket on shard_0)",
    )
    parser.add_argument(
        "--codec",
        choices=("msgpack", "json"),
        default="msgpack",
        help="the store's body codec (BENCH_CODEC; default msgpack; json: JsonCodec, whose "
        "bodies the cleaner's backfill reads on the server)",
    )
    parser.add_argument("--buffer-pool", help="innodb_buffer_pool_size per server (1G; quick 128M)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="output directory")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    unknown = set(args.legs) - set(plans.LEGS)
    if unknown:
        parser.error(f"unknown legs {sorted(unknown)}; legs: {','.join(plans.LEGS)}")
    if args.entities:
        args.sizes, args.main_size = [args.entities], args.entities
    if args.placed:  # before bench.data is imported anywhere, and for child processes
        os.environ["BENCH_PLACED"] = "1"
    # Before Django reads bench.settings (the first migrate stores this map), and for children.
    os.environ["BENCH_CODEC"] = args.codec  # before bench.settings is read, and for children
    if args.servers == 1:
        os.environ["BENCH_SHARD_MAP"] = ONE_SERVER_MAP
    else:
        os.environ.pop("BENCH_SHARD_MAP", None)
    return args


def start_databases(buffer_pool: str, cache: bool = False, network: Any = None) -> list[Any]:
    """Two servers, their databases created, their URLs exported for ``bench.settings``; with
    ``cache``, a throwaway ``redis-server`` too (``BENCH_CACHE_URL``, the cache leg's); with a
    :class:`bench.netem.Network`, the servers in its servers' namespace."""
    import MySQLdb

    from schemaless_store.testing.mariadb import ServerError, start_servers

    where: dict[str, Any] = {}
    if network is not None:
        from .netem import SERVER_ADDRESS

        where = {"host": SERVER_ADDRESS, "prefix": network.server_prefix}
    try:
        servers = start_servers(2, buffer_pool=buffer_pool, **where)
    except ServerError as exc:
        # mariadb-install-db shares /tmp for its temporary tables with every other server being
        # installed on the machine (other engineers' test runs) and fails now and then: retry.
        print(f"bench: starting MariaDB failed, retrying once: {str(exc)[:200]}", file=sys.stderr)
        servers = start_servers(2, buffer_pool=buffer_pool, **where)
    for number, names in MARIADB_DATABASES.items():
        conn = MySQLdb.connect(host=servers[number].host, port=servers[number].port, user="root")
        for name in names:
            conn.cursor().execute(
                f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
        conn.close()
    first, second = servers
    os.environ["BENCH_META_URL"] = first.url("meta")
    os.environ["BENCH_SHARD_URLS"] = f"{first.url('shard0')},{second.url('shard1')}"
    os.environ["BENCH_PEER_URL"] = first.url("peer")
    os.environ["BENCH_IMPORT_URLS"] = ",".join(
        [
            first.url("importa0"),
            second.url("importa1"),
            first.url("importb0"),
            second.url("importb1"),
        ]
    )
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    if cache:
        from schemaless_store.testing.redis import start_redis

        os.environ["BENCH_CACHE_URL"] = start_redis().url
    return servers


def machine(conn: Any) -> dict[str, Any]:
    import django
    import MySQLdb

    cursor = conn.cursor()
    cursor.execute("SELECT VERSION()")
    (version,) = cursor.fetchone()
    with open("/proc/meminfo") as meminfo:
        total_kib = int(next(line for line in meminfo if line.startswith("MemTotal")).split()[1])
    git = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    ).stdout.strip()
    # The tree is shared with other engineers: record what was uncommitted when this ran.
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    return {
        "nproc": os.cpu_count(),
        "memory_gib": total_kib / 1024 / 1024,
        "mariadb": version,
        "python": platform.python_version(),
        "django": django.get_version(),
        "mysqlclient": ".".join(str(p) for p in MySQLdb.version_info[:3]),
        "platform": platform.platform(),
        "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "git": git or "unknown",
        "git_uncommitted": [line[3:] for line in dirty],
    }


def setup(plan: plans.Plan, verbose: bool = True, cache: bool = False, network: Any = None) -> Any:
    """Servers started, Django set up and migrated, the peer's table created: a :class:`Bench`
    with nothing loaded yet (``cache``: a Redis server for the cache leg too; ``network``: the
    servers behind :mod:`bench.netem`'s veth pair)."""
    servers = start_databases(plan.buffer_pool, cache=cache, network=network)

    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    call_command("migrateall", verbosity=0)

    from . import peer
    from .context import Bench
    from .raw import RawStore, connect

    peer_conn = connect(settings.DATABASES["peer"])
    peer.create(peer_conn)
    return Bench(
        plan=plan,
        servers=servers,
        raw=RawStore(settings.DATABASES),
        peer=peer.Peer(peer_conn),
        verbose=verbose,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plans.choose(args.quick, args.sizes, args.main_size, args.rounds, args.buffer_pool)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    clock = time.perf_counter()
    network, refused = None, None
    if "netem" in args.legs:  # first: this process moves into a namespace before any connection
        from . import netem as netem_network

        try:
            network = netem_network.create(args.netem_ms)
        except netem_network.Refused as exc:
            refused = str(exc)
            print(f"bench: no delayed network, the netem leg reports why: {refused}")
    bench = setup(plan, verbose=not args.quiet, cache="cache" in args.legs, network=network)

    from .legs import (
        backup,
        cache,
        clients,
        devapi,
        get,
        index_add,
        index_move,
        layout,
        netem,
        put,
        query,
        scale,
        scatter,
    )
    from .load import forget_writes, load_stage

    run: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "command": shlex.join(["python", "-m", "bench.run", *(argv or sys.argv[1:])]),
        "started": started.isoformat().replace("+00:00", "Z"),
        "plan": plan.__dict__,
        "servers": args.servers,
        "codec": args.codec,
        "legs": args.legs,
        "machine": machine(bench.peer.conn),
        "loads": [],
        "comparisons": [],
        "scale": [],
        "index_add": [],
        "index_move": [],
        "backup_memory": [],
    }
    main_legs = {
        "put": put.run_put,
        "bulk_put": put.run_bulk_put,
        "get": get.run_get,
        "get_many": get.run_get_many,
        "query": query.run,
        "cache": cache.run,
        "clients": clients.run,
        "devapi": devapi.run,
        "layout": layout.run,
    }
    # The live index add runs where the other legs compare (100k) and at the largest size, so
    # that the cleaner's peak memory is seen at both.
    index_add_sizes = {plan.main_size, max(plan.sizes)}
    # Backups at the main size and above (100k and 1M in a full run), or at every size when
    # that leaves fewer than two (memory is compared between the smallest and the largest).
    backup_sizes = [s for s in plan.sizes if s >= plan.main_size]
    if len(backup_sizes) < 2:
        backup_sizes = list(plan.sizes)
    for stage in stages(list(plan.sizes)):
        run["loads"].append(load_stage(bench, stage))
        if "scale" in args.legs:
            bench.log(f"scale: get and page query at {bench.size:,}")
            run["scale"].extend(scale.run(bench))
        if bench.size == plan.main_size:
            for name, leg in main_legs.items():
                if name in args.legs:
                    bench.log(f"{name} at {bench.size:,}")
                    found = leg(bench)
                    run["comparisons"].extend(found if isinstance(found, list) else [found])
                    if name in ("put", "bulk_put", "clients"):
                        forget_writes(bench)  # the store holds the data set again
        if "netem" in args.legs and bench.size == plan.main_size:
            bench.log(f"netem at {bench.size:,}")
            run["netem"] = netem.run(bench, network, args.netem_ms, refused)
            run["comparisons"].extend(run["netem"].pop("comparisons", []))
        if "scatter" in args.legs and bench.size == max(plan.sizes):
            # Issue 4 asks it at 1M: the largest size (it backfills an index of its own there).
            bench.log(f"scatter at {bench.size:,}")
            run["comparisons"].extend(scatter.run(bench))
        if "index_add" in args.legs and bench.size in index_add_sizes:
            run["index_add"].extend(index_add.run(bench))
        if "index_move" in args.legs and bench.size == plan.main_size:
            run["index_move"].extend(index_move.run(bench))
        if "backup" in args.legs and bench.size in backup_sizes:
            compared, memory = backup.run(bench)
            run["comparisons"].extend(compared)
            run["backup_memory"].append(memory)
    run["scale_summary"] = scale.summary(run["scale"])
    run["backup_memory_summary"] = backup.memory_summary(run["backup_memory"])
    run["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    run["seconds"] = time.perf_counter() - clock
    bench.raw.close()
    bench.peer.conn.close()
    from .report import write

    json_path, md_path = write(run, args.out)
    print(md_path.read_text())
    print(f"bench: wrote {json_path} and {md_path} in {run['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
