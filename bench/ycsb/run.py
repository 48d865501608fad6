"""``python -m bench.ycsb``: YCSB's core workloads (:mod:`.workloads`) against the store, with
and without the near cache, a table of raw columns and a table with one JSON column, in one
run on the bench's two throwaway MariaDB servers (and a throwaway Redis), history off.

    .venv/bin/python -m bench.ycsb                      # 20,000 records, A-F, 4 clients on B, C
    .venv/bin/python -m bench.ycsb --quick              # smoke: 2,000 records, few ops
    .venv/bin/python -m bench.ycsb --workloads C,D --contenders store_near,json --threads 0

Each contender is a client process of its own (:mod:`.worker`). The run:

1. **load**: every contender inserts the same records (``--records``, 10 fields of 100 bytes),
   one at a time, in chunks taken in turn;
2. **cold**: reads of records never read before, each once (every read a cache miss): what a
   miss costs; then every record is read once by every contender, untimed (**warm**);
3. **A, B, C, F, D, E** (YCSB's order: the inserting ones last): ``--rounds`` rounds of
   ``--ops`` operations after one unrecorded warm-up round; each round's sequence is the same
   for every contender, which take their turns in an order that rotates;
4. **clients**: ``--threads`` processes per contender at once on B and C (aggregate ops/s).

A ratio is a contender's ops/s over the JSON column's in the same round, the median over
rounds (above 1: faster than the JSON column). Writes ``<out>/ycsb-<timestamp>.json`` and
``.md``; docs/performance.md#ycsb reads them.
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
import time
from pathlib import Path
from typing import Any

from ..stats import percentile
from .workloads import WORKLOADS, Sequence

CONTENDERS = ("store", "store_near", "store_redis", "store_history", "raw", "json")
DEFAULT_CONTENDERS = ("store", "store_near", "raw", "json")
ORDER = "ABCFDE"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ycsb", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--records", type=int, help="records loaded (default 20000; quick 2000)")
    parser.add_argument("--ops", type=int, help="operations per round (default 1000; quick 150)")
    parser.add_argument("--rounds", type=int, help="measured rounds (default 3; quick 2)")
    parser.add_argument("--cold", type=int, help="cold reads per round (default 300; quick 60)")
    parser.add_argument(
        "--workloads",
        default=ORDER,
        type=lambda s: "".join(w for w in ORDER if w in s.upper().replace(",", "")),
        help="which of A-F (default all, run in YCSB's order A B C F D E)",
    )
    parser.add_argument(
        "--contenders",
        default=",".join(DEFAULT_CONTENDERS),
        type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
        help=f"comma-separated subset of {','.join(CONTENDERS)} (json is always in)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=4,
        help="client processes per contender for the concurrent case on B and C (0: skip)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke mode")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--buffer-pool", default="512M", help="innodb_buffer_pool_size")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="output directory")
    args = parser.parse_args(argv)
    unknown = set(args.contenders) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders {sorted(unknown)}; contenders: {','.join(CONTENDERS)}")
    if "json" not in args.contenders:
        args.contenders.append("json")
    args.records = args.records or (2000 if args.quick else 20_000)
    args.ops = args.ops or (150 if args.quick else 1000)
    args.rounds = args.rounds or (2 if args.quick else 3)
    args.cold = args.cold or (60 if args.quick else 300)
    if args.records < 100 or args.ops < 1 or args.rounds < 1:
        parser.error("--records must be at least 100, --ops and --rounds at least 1")
    return args


class Worker:
    """A client process (:mod:`.worker`) and its pipe."""

    def __init__(self, contender: str) -> None:
        self.contender = contender
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.ycsb.worker", contender],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._answer()  # ready

    def send(self, ops: list[Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": "run", "ops": ops}) + "\n")
        self.proc.stdin.flush()

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"YCSB client {self.contender} died (exit {self.proc.wait()})")
        return json.loads(line)  # type: ignore[no-any-return]

    def run(self, ops: list[Any]) -> dict[str, Any]:
        self.send(ops)
        return self._answer()

    def count(self, ops: list[Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": "count", "ops": ops}) + "\n")
        self.proc.stdin.flush()
        return self._answer()["round_trips"]  # type: ignore[no-any-return]

    def quit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def log(message: str) -> None:
    print(f"ycsb: {message}", flush=True)


def prepare(buffer_pool: str) -> list[Any]:
    """The bench's servers and Redis, a ``ycsb`` database on each (the JSON table on the first,
    the raw table on the second), the store migrated (its ``index_ycsb_key`` included)."""
    import MySQLdb

    from ..run import start_databases
    from .clients import CREATE_JSON, CREATE_RAW

    servers = start_databases(buffer_pool, cache=True)
    for server, create in zip(servers, (CREATE_JSON, CREATE_RAW), strict=True):
        conn = MySQLdb.connect(host=server.host, port=server.port, user="root")
        conn.cursor().execute("CREATE DATABASE ycsb CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        conn.select_db("ycsb")
        conn.cursor().execute(create)
        conn.close()
    os.environ["BENCH_YCSB_JSON_URL"] = servers[0].url("ycsb")
    os.environ["BENCH_YCSB_RAW_URL"] = servers[1].url("ycsb")
    os.environ["BENCH_YCSB"] = "1"  # bench.benchapp declares index_ycsb_key

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrateall", verbosity=0)
    return servers


def summary(latencies: list[float]) -> dict[str, float]:
    return {
        "ops": len(latencies),
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
    }


def measure(
    workers: dict[str, Worker], rounds: list[list[Any]], name: str, warmup: bool = False
) -> dict[str, Any]:
    """Every contender runs every round's ops, in rotating order; the record of ``name``
    (``warmup``: the first round is run and not recorded)."""
    names = list(workers)
    walls: dict[str, list[float]] = {c: [] for c in names}
    counts: dict[str, list[int]] = {c: [] for c in names}
    per_op: dict[str, dict[str, list[float]]] = {c: {} for c in names}
    cache: dict[str, Any] = {}
    for number, ops in enumerate(rounds):
        shift = number % len(names)
        for contender in names[shift:] + names[:shift]:
            answer = workers[contender].run(ops)
            if warmup and number == 0:
                continue
            walls[contender].append(answer["wall"])
            counts[contender].append(len(ops))
            for kind, values in answer["lat"].items():
                per_op[contender].setdefault(kind, []).extend(values)
            if "cache" in answer:
                cache[contender] = answer["cache"]
    return record(name, names, walls, counts, per_op, cache)


def record(
    name: str,
    names: list[str],
    walls: dict[str, list[float]],
    counts: dict[str, list[int]],
    per_op: dict[str, dict[str, list[float]]],
    cache: dict[str, Any],
) -> dict[str, Any]:
    out: dict[str, Any] = {"workload": name, "contenders": {}, "cache": cache}
    base = [n / w for n, w in zip(counts["json"], walls["json"], strict=True)]
    for contender in names:
        rates = [n / w for n, w in zip(counts[contender], walls[contender], strict=True)]
        out["contenders"][contender] = {
            "ops_per_s": sum(counts[contender]) / sum(walls[contender]),
            "ratio_to_json": statistics.median(r / b for r, b in zip(rates, base, strict=True)),
            "per_op": {kind: summary(values) for kind, values in sorted(per_op[contender].items())},
        }
    return out


def concurrent(names: list[str], threads: int, ops: list[list[Any]]) -> dict[str, float]:
    """``threads`` client processes per contender, one contender at a time, each running its
    share of ``ops``: the contenders' aggregate ops/s (total ops over the slowest client)."""
    rates: dict[str, float] = {}
    for contender in names:
        pool = [Worker(contender) for _ in range(threads)]
        shares = [ops[k::threads] for k in range(threads)]
        for worker, share in zip(pool, shares, strict=True):  # warm-up: connections, caches
            worker.send(share)
        for worker in pool:
            worker._answer()
        for worker, share in zip(pool, shares, strict=True):
            worker.send(share)
        walls = [worker._answer()["wall"] for worker in pool]
        rates[contender] = len(ops) / max(walls)
        for worker in pool:
            worker.quit()
    return rates


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    clock = time.perf_counter()
    log(f"servers, Redis and the store's tables ({args.records:,} records)")
    servers = prepare(args.buffer_pool)
    from django.conf import settings

    from ..raw import connect
    from ..run import machine

    names = [c for c in CONTENDERS if c in args.contenders]
    workers = {name: Worker(name) for name in names}
    results: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "bench.ycsb", *(argv or sys.argv[1:])]),
        "started": started.isoformat().replace("+00:00", "Z"),
        "records": args.records,
        "ops_per_round": args.ops,
        "rounds": args.rounds,
        "threads": args.threads,
        "seed": args.seed,
        "workloads": [],
    }
    meta = connect(settings.DATABASES["default"])
    results["machine"] = machine(meta)
    meta.close()

    chunk = max(100, args.records // 10)
    load_rounds = [
        [["insert", k, 0, 0] for k in range(lo, min(lo + chunk, args.records))]
        for lo in range(0, args.records, chunk)
    ]
    log(f"load: {args.records:,} records into each of {', '.join(names)}")
    results["workloads"].append(measure(workers, load_rounds, "load"))

    log("cold: reads of records never read (every cache a miss)")
    import random

    unread = list(range(args.records))
    random.Random(args.seed).shuffle(unread)
    cold_rounds = [
        [["read", k, 0, 0] for k in unread[n * args.cold : (n + 1) * args.cold]]
        for n in range(args.rounds)
    ]
    results["workloads"].append(measure(workers, cold_rounds, "cold"))

    # Every record read once by every contender, untimed: the JSON column's and the raw
    # table's rows are all in the buffer pool after the load, and a server running for a while
    # has its near cache as full as its reads made it; the workloads then compare warm with
    # warm (the cold row above priced the misses).
    log("warm: every record read once by every contender (untimed)")
    everything = [["read", k, 0, 0] for k in range(args.records)]
    for worker in workers.values():
        for lo in range(0, len(everything), 5000):
            worker.run(everything[lo : lo + 5000])

    records = args.records
    for number, name in enumerate(args.workloads):
        sequence = Sequence(
            WORKLOADS[name], records, args.seed + number, args.ops * (args.rounds + 1)
        )
        warmup = sequence.ops(args.ops)
        log(f"{name}: {WORKLOADS[name].what} (warm-up, then {args.rounds} rounds of {args.ops})")
        measured = [warmup] + [sequence.ops(args.ops) for _ in range(args.rounds)]
        results["workloads"].append(measure(workers, measured, name, warmup=True))
        records = sequence.records
    # Round trips per operation (untimed, spied): reads twice over the same keys (a cold then a
    # warm cache), updates, read-modify-writes, inserts of new records, scans.
    keys = list(range(0, args.records, max(1, args.records // 20)))[:20]
    probe = [["read", k, 0, 0] for k in keys] * 2 + [["update", k, 1, 0] for k in keys]
    probe += [["rmw", k, 2, 0] for k in keys] + [["scan", k, 0, 10] for k in keys[:5]]
    probe += [["insert", records + n, 0, 0] for n in range(10)]
    results["round_trips"] = {name: worker.count(probe) for name, worker in workers.items()}
    for worker in workers.values():
        worker.quit()

    if args.threads > 1:
        results["concurrent"] = []
        for number, name in enumerate(w for w in "BC" if w in args.workloads):
            sequence = Sequence(
                WORKLOADS[name], records, args.seed + 100 + number, args.ops * args.rounds
            )
            ops = sequence.ops(args.ops * args.rounds)
            log(f"{name} with {args.threads} client processes per contender")
            rates = concurrent(names, args.threads, ops)
            results["concurrent"].append(
                {
                    "workload": name,
                    "threads": args.threads,
                    "ops_per_s": rates,
                    "ratio_to_json": {c: rates[c] / rates["json"] for c in names},
                }
            )
    results["seconds"] = time.perf_counter() - clock
    results["machine"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for server in servers:
        server.stop()

    from .report import write

    json_path, md_path = write(results, args.out)
    print(md_path.read_text())
    log(f"wrote {json_path} and {md_path} in {results['seconds']:.0f} s")
    return 0
