"""``python -m bench.ycsb.instructions``: a YCSB operation's instructions in the client process,
counted by ``valgrind --tool=callgrind``, for the store with and without the near cache
(docs/performance.md#the-near-cache-under-writes-issue-45-item-6).

Wall times on a shared, loaded machine move with its load; instruction counts do not. For each
contender and workload, a client process under callgrind (:func:`child`) reads every record
once (not counted: the near cache as warm as a server's reads make it), then runs the
workload's first N operations, and again in another process its first 2N; only the loop is
collected (``--toggle-collect=functools_reduce``, the garbage collector off, the shard map not
re-read). (count(2N) - count(N)) / N is one operation's instructions in the client process,
its threads included (the near cache's thread applying Redis's pushes); the kernel's work for
its system calls and the servers' are not counted. Each child also reports its cache counters
for the counted operations (near hits, Redis hits, misses), so a near cache that stopped
serving shows.

    .venv/bin/python -m bench.ycsb.instructions                  # 2,000 records, N = 300, B and C
    .venv/bin/python -m bench.ycsb.instructions --workloads B --ops 200
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..callgrind import collected
from .workloads import WORKLOADS, Sequence

CONTENDERS = ("store", "store_near")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ycsb.instructions", description=__doc__)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--ops", type=int, default=300, help="N: the counts of N and 2N ops")
    parser.add_argument(
        "--workloads",
        default="BC",
        type=lambda s: s.upper().replace(",", ""),
        help="YCSB's letters, U: updates only (of B's keys), I: inserts of new records",
    )
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    contenders = [c for c in args.contenders.split(",") if c]
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    from .run import Worker, prepare

    servers = prepare("128M")
    results: dict[str, Any] = {
        "command": " ".join(["python", "-m", "bench.ycsb.instructions", *(argv or sys.argv[1:])]),
        "started": started.isoformat().replace("+00:00", "Z"),
        "git": os.popen("git describe --always --dirty").read().strip(),
        "records": args.records,
        "ops": args.ops,
        "loadavg_before": load_before,
        "instructions_per_op": {},
        "cache": {},
    }
    try:
        for name in contenders:
            worker = Worker(name)
            for lo in range(0, args.records, 1000):
                hi = min(lo + 1000, args.records)
                worker.run([["insert", k, 0, 0] for k in range(lo, hi)])
            worker.quit()
        with tempfile.TemporaryDirectory(prefix="ycsb-instr-") as tmp:
            for number, workload in enumerate(args.workloads):
                ops = Sequence(
                    WORKLOADS[workload.replace("U", "B").replace("I", "B")],
                    args.records,
                    args.seed + number,
                    2 * args.ops,
                )
                sequence = ops.ops(2 * args.ops)
                if workload == "U":  # updates only, of B's keys: what one update costs
                    sequence = [["update", op[1], i % 10, 0] for i, op in enumerate(sequence)]
                for name in contenders:
                    counts = []
                    for size in (args.ops, 2 * args.ops):
                        path = Path(tmp) / f"{workload}-{name}-{size}.json"
                        todo = sequence[:size]
                        if workload == "I":  # inserts of new records, other keys in each run
                            first = args.records + (0 if size == args.ops else 4 * args.ops)
                            todo = [["insert", first + i, 0, 0] for i in range(size)]
                        path.write_text(json.dumps({"records": args.records, "ops": todo}))
                        print(f"instructions: {workload} {name} {size} ops", flush=True)
                        count, cache = _callgrind(tmp, name, path)
                        counts.append(count)
                        results["cache"][f"{workload} {name} {size}"] = cache
                    per_op = (counts[1] - counts[0]) / args.ops
                    results["instructions_per_op"].setdefault(workload, {})[name] = per_op
                    print(f"instructions: {workload} {name}: {per_op:,.0f} per op", flush=True)
    finally:
        for server in servers:
            server.stop()
    results["loadavg_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"ycsb-instructions-{started.strftime('%Y%m%dT%H%M%SZ')}"
    stem.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# YCSB instructions per operation ({results['started']}, {results['git']})",
        "",
        f"`{results['command']}`; load average {load_before} before, "
        f"{results['loadavg_after']} after.",
        "",
        "| workload | " + " | ".join(contenders) + " |",
        "|---|" + "---:|" * len(contenders),
    ]
    for workload, counts in results["instructions_per_op"].items():
        lines.append(
            f"| {workload} | " + " | ".join(f"{counts[c]:,.0f}" for c in contenders) + " |"
        )
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"instructions: wrote {stem}.json and .md in {time.time() - started.timestamp():.0f} s")
    return 0


def _callgrind(tmp: str, contender: str, path: Path) -> tuple[int, dict[str, Any]]:
    stats = Path(tmp) / "stats.json"
    count = collected("bench.ycsb.instructions", contender, str(path), str(stats))
    return count, json.loads(stats.read_text())


def child(contender: str, path: str, stats_path: str) -> int:
    """Under callgrind: read every record once, then run the ops inside ``functools.reduce``."""
    import functools
    import gc
    from dataclasses import asdict

    from .worker import make

    client = make(contender)
    from django.conf import settings
    from django.test.utils import override_settings

    from schemaless_store.cache import entity_cache, near_cache

    # No re-read of the shard map (it depends on time, and under valgrind a read is ~50x
    # slower); a DROP_TIMEOUT that valgrind's slowness cannot exceed between PINGs.
    # and entries that outlive the run: under valgrind it lasts minutes, and CACHE_TIMEOUT's
    # expiries (the tokens' pushes, the copies' deadlines) would empty the near cache midway.
    changed: dict[str, Any] = {"MAP_MAX_AGE": 3600, "CACHE_TIMEOUT": 7200}
    if settings.SCHEMALESS.get("NEAR_CACHE") is not None:
        # A PING every 10 s: few, so that the longer run's extra PINGs stay out of the count.
        changed["NEAR_CACHE"] = {**settings.SCHEMALESS["NEAR_CACHE"], "DROP_TIMEOUT": 40.0}
        # The near cache's thread runs inside functools.reduce too: callgrind's collection
        # state is per thread, and this is how its work (the pushes) is counted. Its work for
        # the warm reads is the same in both runs, so it cancels out.
        from schemaless_store.cache.near_cache import NearCache

        run = NearCache._run
        NearCache._run = lambda self: functools.reduce(lambda acc, _: run(self), [0], 0)  # type: ignore[method-assign]
    override_settings(SCHEMALESS={**settings.SCHEMALESS, **changed}).enable()
    if changed.get("NEAR_CACHE") is not None:
        # Redis emptied first: the warm reads then miss alike in the N and the 2N run, so that
        # the near cache's thread (counted from its start) applies the same pushes for them in
        # both, and they cancel out. Done before this process's near cache exists.
        from django.core.cache import caches

        caches["entities"]._cache.get_client(write=True).flushdb()
    spec = json.loads(Path(path).read_text())
    for keynum in range(spec["records"]):  # not counted: every cache as warm as reads make it
        client.do(("read", keynum, 0, 0))
    if changed.get("NEAR_CACHE") is not None:
        for _ in range(600):
            near = near_cache.existing()
            if near is not None and near.usable():
                break
            time.sleep(0.1)
        else:
            raise SystemExit("the near cache's tracking connection never came up")
    time.sleep(0.5)  # the pushes of the warm reads' own tokens applied
    ops = [tuple(op) for op in spec["ops"]]
    do = client.do
    entity_cache.reset_stats()
    gc.collect()
    gc.disable()  # a collection's millions of instructions would land in one run or the other
    functools.reduce(lambda acc, op: (do(op), acc)[1], ops, 0)
    gc.enable()
    near = near_cache.existing()
    Path(stats_path).write_text(
        json.dumps(
            {
                **asdict(entity_cache.stats),
                **({"near": asdict(near.stats), "near_len": len(near)} if near else {}),
            }
        )
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2], sys.argv[3], sys.argv[4]))
    sys.exit(main())
