"""``python -m bench.ycsb.profile``: where a YCSB insert, update and read of the store spend
their time, next to the JSON column's, in one process (docs/performance.md#ycsb).

For each operation it prints the wall time and this process's CPU time per operation (the
rest of the wall time is waiting on the servers), then a cProfile of the store's insert and
update sorted by own time: ``Connection.query`` and ``next_result`` are the waits on the
server's answers, everything else is the client's Python.

    .venv/bin/python -m bench.ycsb.profile [--ops 1500] [--out bench/results]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import os
import pstats
import time
from pathlib import Path
from typing import Any

from ..report import publish
from .run import prepare
from .worker import make

RESULTS = Path(__file__).resolve().parents[1] / "results"


def _run(client: Any, kind: str, keys: list[str]) -> None:
    for key in keys:
        if kind == "insert":
            client.insert(key, client.record())
        elif kind == "update":
            client.update(key, "field3", client.value())
        else:
            client.read(key)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ycsb.profile", description=__doc__)
    parser.add_argument("--ops", type=int, default=1500)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    lines = [f"ycsb profile {started}, load average {os.getloadavg()[0]:.2f} at start"]
    prepare("128M")
    clients = {"json": make("json"), "store": make("store")}
    keys = [f"user{n}" for n in range(args.ops)]
    for kind in ("insert", "update", "read"):
        for name, client in clients.items():
            wall, cpu = time.perf_counter(), time.process_time()
            _run(client, kind, keys)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            lines.append(
                f"{kind:6} {name:5}: {wall / len(keys) * 1e6:6.0f} us wall, "
                f"{cpu / len(keys) * 1e6:6.0f} us client CPU per operation"
            )
    for kind in ("insert", "update"):
        keys = [f"profiled{n}" for n in range(args.ops)] if kind == "insert" else keys
        profile = cProfile.Profile()
        profile.enable()
        _run(clients["store"], kind, keys)
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(20)
        lines += [f"==== store {kind}, cProfile by own time", text.getvalue()]
    lines.append(f"load average {os.getloadavg()[0]:.2f} at end")
    publish("\n".join(lines), args.out, f"ycsb-profile-{started}.txt", "ycsb.profile")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
