"""``python -m bench.move --entities 100000``: the bucket-move leg (issue 18), on three throwaway
MariaDB servers (shard_0 and the metadata on the first, shard_1 on the second, shard_2, which
owns no buckets at first, on the third).

1. Load ``--entities`` entities with ``bulk_put`` (the benchmark's data set: two indexes).
2. **Raw copy**, the baseline: with mysqlclient only, read the ``entities`` rows of the moving
   buckets (a third of shard_0's: ``0-682``) from shard_0 in primary-key batches, keep those in
   the buckets (computed in Python, as the mover does), and insert them into a scratch table
   on the third server, batch by batch. Its rate is entities per second of that copy.
3. **Ours**: ``manage.py movebuckets --to shard_2 --buckets 0-682`` in a child process, while a
   writer thread here commits ``Entity.objects.create`` puts (a quarter of them land in the
   moving buckets). The rate is entities moved per second of the whole move (copy, catch-up,
   flip, verification; the old copies' deletion is reported apart). The writer's latency is
   reported before the move, during its copy, and in the flip's window (from the fence to
   the new map); its longest write at the flip is the number the issue bounds (< 1 s).

Writes ``move-<time>.json`` and ``.md`` into ``--out`` (bench/results by default). Rounds: the
raw copy runs ``--rounds`` times (median); the move runs once (it changes the store).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MOVED = "0-682"
MOVED_SET = set(range(683))


def start(buffer_pool: str) -> list[Any]:
    import MySQLdb

    from schemaless_store.testing.mariadb import start_servers

    servers = start_servers(3, buffer_pool=buffer_pool)
    for server, names in zip(
        servers, (["meta", "shard0", "peer"], ["shard1"], ["shard2", "raw"]), strict=True
    ):
        conn = MySQLdb.connect(host="127.0.0.1", port=server.port, user="root")
        for name in names:
            conn.cursor().execute(
                f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            )
        conn.close()
    first, second, third = servers
    os.environ["BENCH_META_URL"] = first.url("meta")
    os.environ["BENCH_SHARD_URLS"] = ",".join(
        [first.url("shard0"), second.url("shard1"), third.url("shard2")]
    )
    os.environ["BENCH_PEER_URL"] = first.url("peer")
    os.environ["BENCH_SHARD_MAP"] = json.dumps(
        {"shard_0": "0-2047", "shard_1": "2048-4095", "shard_2": []}
    )
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    return servers


def load(size: int) -> float:
    from schemaless_store.models import Entity

    from .data import Stage

    started = time.perf_counter()
    for chunk in Stage(0, size).chunks(2000):
        Entity.objects.bulk_put(chunk, batch_size=2000)
    return size / (time.perf_counter() - started)


def raw_copy(servers: list[Any]) -> tuple[float, int]:
    """The baseline: mysqlclient reads shard_0's entities in key order and writes the moving
    buckets' rows to a table on the third server. Entities per second, and how many."""
    import MySQLdb

    from schemaless_store.values.bucket_hash import bucket_of

    source = MySQLdb.connect(host="127.0.0.1", port=servers[0].port, user="root", db="shard0")
    target = MySQLdb.connect(host="127.0.0.1", port=servers[2].port, user="root", db="raw")
    read, write = source.cursor(), target.cursor()
    write.execute("DROP TABLE IF EXISTS entities")
    write.execute(
        # The store's layout (docs/design.md#the-entities-table): clustered by id.
        "CREATE TABLE entities (id BINARY(16) NOT NULL PRIMARY KEY, added_id BIGINT "
        "AUTO_INCREMENT UNIQUE, updated DATETIME(6) NOT NULL, body MEDIUMBLOB NOT NULL, "
        "KEY (updated, added_id)) ENGINE=InnoDB"
    )
    target.commit()
    copied, last = 0, 0
    started = time.perf_counter()
    while True:
        read.execute(
            "SELECT added_id, id, updated, body FROM entities WHERE added_id > %s "
            "ORDER BY added_id LIMIT 1000",
            (last,),
        )
        rows = read.fetchall()
        if not rows:
            break
        moving = [(r[1], r[2], r[3]) for r in rows if bucket_of(bytes(r[1]), 4096) in MOVED_SET]
        if moving:
            write.executemany(
                "INSERT INTO entities (id, updated, body) VALUES (%s, %s, %s)", moving
            )
            target.commit()
        copied += len(moving)
        last = rows[-1][0]
    seconds = time.perf_counter() - started
    source.close()
    target.close()
    return copied / seconds, copied


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def window(samples: list[tuple[float, float]], start: float, end: float) -> dict[str, float]:
    lat = [latency for at, latency in samples if start <= at < end]
    return {
        "writes": len(lat),
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": max(lat) * 1000 if lat else float("nan"),
    }


def ours(writer_before: float, mover_args: list[str]) -> dict[str, Any]:
    import threading

    from django.db import connections

    from schemaless_store.config.metadata import BucketMove
    from schemaless_store.models import Entity
    from schemaless_store.topology import shards

    from .data import writer_properties

    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            n = 0
            while not stop.is_set():
                at, begun = time.time(), time.perf_counter()
                Entity.objects.create(**writer_properties(n, "live"))
                samples.append((at, time.perf_counter() - begun))
                n += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            shards.close_index_connections()
            connections.close_all()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    time.sleep(writer_before)
    start = time.time()
    with tempfile.TemporaryFile() as log:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "django", "movebuckets"),
                *("--to", "shard_2", "--buckets", MOVED, *mover_args),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.seek(0)
        output = log.read().decode(errors="replace")
    end = time.time()
    time.sleep(1.0)
    stop.set()
    thread.join(timeout=60)
    if done.returncode != 0 or errors:
        raise RuntimeError(f"the move failed: {output[-3000:]} {errors!r}")
    move = BucketMove.objects.get()
    fenced_at = float(move.checkpoints["fenced_at"])
    flipped = move.flipped.timestamp()
    copied = int(move.counts.get("copied entities", 0))
    copy_end = fenced_at  # the copy and catch-up run until the fence
    cleaning = (move.finished - move.flipped).total_seconds()
    first = samples[0][0] if samples else start
    # Writes that began in the flip's window (fence .. new map), and the one under way at the
    # fence: the longest of them is the pause a caller saw.
    flip = [(at, lat) for at, lat in samples if at + lat >= fenced_at and at <= flipped + 0.5]
    return {
        "entities_moved": copied,
        "move_seconds": (move.flipped - move.started).total_seconds(),
        "entities_per_s": copied / (move.flipped - move.started).total_seconds(),
        "cleaning_seconds": cleaning,
        "fence_to_flip_ms": (flipped - fenced_at) * 1000,
        "longest_pause_recorded_ms": (move.longest_pause or 0) * 1000,
        "writer_before": window(samples, first, start),
        "writer_during_copy": window(samples, start, copy_end),
        "writer_at_flip": {
            "writes": len(flip),
            "max_ms": max(lat for _at, lat in flip) * 1000 if flip else float("nan"),
        },
        "writer_after": window(samples, flipped, end),
        "verified": move.counts.get("verified"),
        "output_tail": output[-500:],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--buffer-pool", default="256M")
    parser.add_argument(
        "--mover-args",
        default="",
        help="More movebuckets options, e.g. '--nice 10' or '--workers 1' (one string).",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)
    servers = start(args.buffer_pool)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrateall", verbosity=0)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    loaded = load(args.entities)
    print(f"bench.move: loaded {args.entities:,} entities ({loaded:,.0f}/s)", flush=True)
    rates = []
    for _round in range(args.rounds):
        rate, copied = raw_copy(servers)
        rates.append(rate)
    raw_rate = statistics.median(rates)
    print(f"bench.move: raw copy {raw_rate:,.0f} entities/s ({copied:,} entities)", flush=True)
    mover_args = shlex.split(args.mover_args)
    found = ours(writer_before=3.0, mover_args=mover_args)
    found["ratio_to_raw"] = found["entities_per_s"] / raw_rate
    result = {
        "started": started.isoformat().replace("+00:00", "Z"),
        "entities": args.entities,
        "moved_buckets": MOVED,
        "mover_args": mover_args,
        "raw_copy": {"entities_per_s": raw_rate, "rounds": rates, "entities": copied},
        "ours": found,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    (out / f"move-{stamp}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / f"move-{stamp}.md").write_text(report(result))
    print(report(result))
    for server in servers:
        server.stop()
    return 0


def report(result: dict[str, Any]) -> str:
    o = result["ours"]
    before, during, at_flip = o["writer_before"], o["writer_during_copy"], o["writer_at_flip"]
    raw = result["raw_copy"]
    growth = during["p99_ms"] / before["p99_ms"] if before["p99_ms"] else float("nan")

    def goal(met: bool) -> str:
        return "met" if met else "missed"

    def lat(w: dict[str, float]) -> str:
        return (
            f"{w['p50_ms']:.2f} / {w['p99_ms']:.2f} / {w['max_ms']:.1f} ms ({w['writes']} writes)"
        )

    rows = [
        (
            f"raw mysqlclient copy of the same rows (median of {len(raw['rounds'])})",
            f"{raw['entities_per_s']:,.0f} entities/s",
            "",
        ),
        (
            "movebuckets: entities moved from its start to its flip (copy, catch-up, fence, flip)",
            f"{o['entities_per_s']:,.0f} entities/s "
            f"({o['entities_moved']:,} in {o['move_seconds']:.1f} s)",
            "",
        ),
        (
            "ratio to the raw copy",
            f"{o['ratio_to_raw']:.2f}x",
            f">= 0.5x: {goal(o['ratio_to_raw'] >= 0.5)}",
        ),
        ("writer p50 / p99 / max before", lat(before), ""),
        (
            "writer p50 / p99 / max during the copy",
            lat(during),
            f"p99 within 2x: {growth:.2f}x, {goal(growth <= 2)}",
        ),
        (
            "longest write at the flip",
            f"{at_flip['max_ms']:.1f} ms ({at_flip['writes']} writes in the window)",
            f"< 1000 ms: {goal(at_flip['max_ms'] < 1000)}",
        ),
        ("fence to new map", f"{o['fence_to_flip_ms']:.1f} ms", ""),
        (
            "deleting the old copies (after the flip, not in the rate)",
            f"{o['cleaning_seconds']:.1f} s",
            "",
        ),
        ("verified", str(o["verified"]), ""),
    ]
    table = "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    return (
        f"# Bucket move at {result['entities']:,} entities ({result['started']})\n\n"
        f"Buckets {result['moved_buckets']} (a third of shard_0's) from shard_0 to shard_2 (a "
        "third server), while a writer commits single puts. movebuckets options: "
        f"{' '.join(result.get('mover_args') or []) or '(defaults)'}.\n\n"
        f"| | value | goal |\n|---|---|---|\n{table}\n"
    )


if __name__ == "__main__":
    sys.exit(main())
