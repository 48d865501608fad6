"""``python -m bench.near_miss``: what a near-cache miss costs against a plain ``get`` (issue 35,
item 4: "a miss costs at most ~1.2x a plain get"), in one run.

Three client processes (:mod:`bench.ycsb.worker`, YCSB's records of 10 fields x 100 bytes):

- ``store``: the store, no cache: a plain ``get`` (one primary-key ``SELECT``);
- ``store_redis``: the Redis entity cache only: a miss is the script's round trip, the ``get``;
- ``store_near``: the entity cache and the near cache: the same, plus the near cache's
  bookkeeping (its lock, the mark, the copy of the row).

Each inserts ``--records`` records (untimed), then reads records it never read, ``--batch`` at a
time, the contenders taking turns in an order that rotates (every read of ``store_redis`` and
``store_near`` a miss), then ``store_near`` reads the same records again (near-cache hits).
Reports p50 and p90 of each and the ratios of the p50s to the plain ``get``'s, with the load
average of the machine before and after (the ratios of a loaded machine are not final figures).
With ``--callgrind N``, the same reads are also counted in instructions, which a loaded machine
does not change (wall times it does): for each of a plain ``get``, a Redis-only miss, a
near-cache miss and a near-cache hit, a client process under ``valgrind --tool=callgrind``
reads 20 records (not counted), then N records never read, and again with 2N. Only the loop
is collected (``--toggle-collect=functools_reduce``: the reads run in a ``functools.reduce``,
the garbage collector off, ``MAP_MAX_AGE`` an hour: no re-read of the map, which depends on
time); the difference over N is one read's instructions in the client
process's reading thread: not the near cache's thread handling the pushes (callgrind collects
per thread, and only the reading thread enters ``functools.reduce``; ``bench.ycsb.instructions``
counts that thread too), nor the kernel's work for its system calls, nor the servers'.
Writes ``<out>/near-miss-<time>.json`` and ``.md``.

    .venv/bin/python -m bench.near_miss                 # 3,000 records, 10 rounds of 200 reads
    .venv/bin/python -m bench.near_miss --quick         # smoke
    .venv/bin/python -m bench.near_miss --profile /tmp/prof   # and a cProfile of each client
    .venv/bin/python -m bench.near_miss --callgrind 200       # and instructions per read
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from .callgrind import collected
from .stats import percentile

CONTENDERS = ("store", "store_redis", "store_near")
CALLGRIND = ("plain", "redis_miss", "near_miss", "near_hit")
WARM = 20  # reads of other records first, outside the count: first calls, imports, connections


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.near_miss", description=__doc__)
    parser.add_argument("--records", type=int, help="records per contender (default 3000)")
    parser.add_argument("--rounds", type=int, help="rounds of cold reads (default 10)")
    parser.add_argument("--batch", type=int, help="reads per contender per round (default 200)")
    parser.add_argument("--quick", action="store_true", help="smoke mode")
    parser.add_argument("--profile", type=Path, help="a directory: a cProfile of each client")
    parser.add_argument("--callgrind", type=int, default=0, help="N: instructions per read too")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="output directory")
    args = parser.parse_args(argv)
    args.records = args.records or (300 if args.quick else 3000)
    args.rounds = args.rounds or (2 if args.quick else 10)
    args.batch = args.batch or (50 if args.quick else 200)
    if args.rounds * args.batch + (3 * args.callgrind + 2 * WARM) * len(CALLGRIND) > args.records:
        parser.error(
            "--rounds x --batch + 12 x --callgrind + 160 reads must not exceed --records "
            "(each read is of a record never read)"
        )
    return args


def summary(latencies: list[float]) -> dict[str, float]:
    return {
        "reads": len(latencies),
        "p50_ms": percentile(latencies, 50) * 1000,
        "p90_ms": percentile(latencies, 90) * 1000,
    }


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    load_before = loadavg()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        os.environ["BENCH_YCSB_PROFILE"] = str(args.profile.resolve())
    from .run import start_databases

    servers = start_databases("256M", cache=True)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrateall", verbosity=0)
    from .ycsb.run import Worker

    workers = {name: Worker(name) for name in CONTENDERS}
    try:
        for name, worker in workers.items():
            print(f"near_miss: {name} inserts {args.records:,} records", flush=True)
            for lo in range(0, args.records, 1000):
                hi = min(lo + 1000, args.records)
                worker.run([["insert", k, 0, 0] for k in range(lo, hi)])
        keys = list(range(args.records))
        random.Random(35).shuffle(keys)
        lat: dict[str, list[float]] = {name: [] for name in CONTENDERS}
        hits: list[float] = []
        names = list(CONTENDERS)
        for number in range(args.rounds):
            batch = [
                ["read", k, 0, 0] for k in keys[number * args.batch : (number + 1) * args.batch]
            ]
            shift = number % len(names)
            for name in names[shift:] + names[:shift]:
                lat[name].extend(workers[name].run(batch)["lat"]["read"])
            hits.extend(workers["store_near"].run(batch)["lat"]["read"])
        stats = workers["store_near"].run([])["cache"]
        unread = keys[args.rounds * args.batch :]
        instructions = callgrind(args.callgrind, unread) if args.callgrind else {}
    finally:
        for worker in workers.values():
            worker.quit()
        for server in servers:
            server.stop()
    plain = percentile(lat["store"], 50)
    results: dict[str, Any] = {
        "command": " ".join(["python", "-m", "bench.near_miss", *(argv or sys.argv[1:])]),
        "started": started.isoformat().replace("+00:00", "Z"),
        "git": os.popen("git describe --always --dirty").read().strip(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "records": args.records,
        "reads": {
            "plain get (store, no cache)": summary(lat["store"]),
            "miss, Redis cache only": summary(lat["store_redis"]),
            "miss, near cache on": summary(lat["store_near"]),
            "hit, near cache (the same ids again)": summary(hits),
        },
        "ratio_p50": {
            "redis miss / plain": percentile(lat["store_redis"], 50) / plain,
            "near miss / plain": percentile(lat["store_near"], 50) / plain,
            "near hit / plain": percentile(hits, 50) / plain,
        },
        "near_cache_stats": stats,
    }
    if instructions:
        results["instructions_per_read"] = instructions
        results["instructions_ratio"] = {
            mode: count / instructions["plain"] for mode, count in instructions.items()
        }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"near-miss-{started.strftime('%Y%m%dT%H%M%SZ')}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# near-cache miss against a plain get ({results['started']}, {results['git']})",
        "",
        f"`{results['command']}`; load average {load_before} before, "
        f"{results['loadavg_after']} after.",
        "",
        "| read | reads | p50 ms | p90 ms | p50 / plain get |",
        "|---|---:|---:|---:|---:|",
    ]
    for what, s in results["reads"].items():
        ratio = s["p50_ms"] / 1000 / plain
        lines.append(
            f"| {what} | {s['reads']} | {s['p50_ms']:.3f} | {s['p90_ms']:.3f} | {ratio:.2f} |"
        )
    if instructions:
        lines += [
            "",
            f"Instructions per read in the client process (callgrind, {args.callgrind} and "
            f"{2 * args.callgrind} reads):",
            "",
            "| read | instructions | / plain get |",
            "|---|---:|---:|",
        ]
        for mode, count in instructions.items():
            lines.append(f"| {mode} | {count:,.0f} | {results['instructions_ratio'][mode]:.2f} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"near_miss: wrote {stem}.json and .md in {time.time() - started.timestamp():.0f} s")
    return 0


def callgrind(n: int, unread: list[int]) -> dict[str, float]:
    """Instructions per read of each of :data:`CALLGRIND`, in a client process under callgrind
    (:func:`child`): (count of 2n reads - count of n reads) / n, on records never read."""
    import hashlib
    import tempfile

    from .ycsb.workloads import key_name

    out: dict[str, float] = {}
    at = 0
    with tempfile.TemporaryDirectory(prefix="near-miss-") as tmp:
        for mode in CALLGRIND:
            counts = []
            for size in (n, 2 * n):
                chunk, at = unread[at : at + WARM + size], at + WARM + size
                ids = [hashlib.md5(f"s:{key_name(k)}".encode()).hexdigest() for k in chunk]
                path = Path(tmp) / f"{mode}-{size}.ids"
                path.write_text("\n".join(ids))
                print(f"near_miss: callgrind, {mode}, {size} reads", flush=True)
                counts.append(collected("bench.near_miss", mode, str(path)))
            out[mode] = (counts[1] - counts[0]) / n
            print(f"near_miss: {mode}: {counts[0]:,} and {counts[1]:,} instructions", flush=True)
    return out


def child(mode: str, path: str) -> int:
    """Under callgrind: read each id in ``path`` once, inside ``functools.reduce``."""
    import functools
    import gc
    import uuid

    import django

    django.setup()
    from django.conf import settings
    from django.test.utils import override_settings

    from schemaless_store.cache import near_cache
    from schemaless_store.models import Entity

    # The shard map is read again once it is MAP_MAX_AGE old: under valgrind a read takes ~50
    # times as long, and those re-reads, which depend on time, would land in the count.
    override_settings(SCHEMALESS={**settings.SCHEMALESS, "MAP_MAX_AGE": 3600}).enable()
    every = [uuid.UUID(line) for line in Path(path).read_text().split()]
    warm, ids = every[:WARM], every[WARM:]
    if mode != "plain":
        near = {"MAX_ENTRIES": 100_000} if mode.startswith("near") else None
        # Entries that outlive the run (minutes under valgrind): no expiry's push in the count.
        cached = {
            **settings.SCHEMALESS,
            "CACHE": "entities",
            "NEAR_CACHE": near,
            "CACHE_TIMEOUT": 7200,
        }
        override_settings(SCHEMALESS=cached).enable()
        Entity.objects.get_many([uuid.uuid4()])  # builds the near cache
        for _ in range(600):
            running = near_cache.existing()
            if near is None or (running is not None and running.usable()):
                break
            time.sleep(0.1)
        else:
            raise SystemExit("the near cache's tracking connection never came up")
    for entity_id in warm:  # not counted: what a first read of anything costs
        Entity.objects.get(id=entity_id)
    if mode == "near_hit":
        for entity_id in ids:
            Entity.objects.get(id=entity_id)
    time.sleep(0.5)  # the pushes of those misses' own tokens applied
    get = Entity.objects.get
    gc.collect()
    gc.disable()  # a collection's millions of instructions would land in one run or the other
    functools.reduce(lambda acc, entity_id: (get(id=entity_id), acc)[1], ids, 0)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2], sys.argv[3]))
    sys.exit(main())
