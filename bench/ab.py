"""``python -m bench.ab --before REV``: the store's code at REV against the working tree's, in
one run, on the same servers and the same data.

    .venv/bin/python -m bench.ab --before 6aba70e                  # 100k entities, 9 rounds
    .venv/bin/python -m bench.ab --before 6aba70e --entities 20000 --rounds 3   # a quick look
    .venv/bin/python -m bench.ab --before receipts-off --legs put,bulk_put   # receipts cost

``--before receipts-off``: both children run the working tree's code, the "before" one with
write receipts switched off (``writes.receipts.RECORD``, for this measurement only).

Two throwaway MariaDB servers are started and loaded once (with the working tree's code). Then
two long-lived child processes serve timing requests: one imports ``schemaless_store`` as it
was at REV (``git archive``, into a temporary directory), the other the working tree's; both
use this tree's ``bench`` (the legs' own ops: ``create``, ``bulk_put`` of 500, ``get``,
``get_many`` of 100, a user's page of 30, every entity of a user). Each round runs every leg on
both, leg by leg, the order of the two alternating from round to round, so a burst of load on
the shared 2-core machine hits both alike. A leg's result is the median over rounds of the
throughput ratio *after / before* within the round, with each side's median p50 beside it, and
the same for the client CPU time per op (the child's own, its threads' included), which the
machine's other load moves much less than wall time. ``--raw`` adds raw mysqlclient
(``bench/raw.py``, in the working tree's child) as a third contender in every round, and the
ratios of both versions against it.
Writes a ``.json`` and a ``.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

from . import plan as plans
from .data import stages

ROOT = Path(__file__).resolve().parent.parent
LEGS = ("put", "bulk_put", "get", "get_many", "query_page", "query_all")
# ``--before`` this: the working tree without write receipts against it with them.
RECEIPTS_OFF = "receipts-off"
# Ops per leg and round (a bulk_put op is a batch of 500 entities).
OPS = {"put": 200, "bulk_put": 2, "get": 600, "get_many": 40, "query_page": 150, "query_all": 60}


# --- a child: one version of the store, timing the legs' ops on request -----------------------


def child(size: int) -> int:
    """Serve ``{"leg", "ops", "seed"}`` requests from stdin with ``{"latencies": [...]}``."""
    import django

    django.setup()
    from django.conf import settings

    import schemaless_store

    if os.environ.get("BENCH_AB_RECEIPTS") == "off":
        from schemaless_store.writes import receipts

        receipts.RECORD = False

    from . import peer
    from .context import Bench
    from .data import writer_properties
    from .legs import get, query
    from .raw import RawStore, connect

    bench = Bench(
        plan=plans.FULL,
        servers=[],
        raw=RawStore(settings.DATABASES),
        peer=peer.Peer(connect(settings.DATABASES["peer"])),
        verbose=False,
    )
    bench.loaded = stages([size])
    from schemaless_store.models import Entity

    # Each process numbers the entities it writes from its own pid: the two never collide.
    written = iter(range(os.getpid() * 10**6, 10**12))
    ops: dict[str, tuple[Callable[[Any], Any], Callable[[int], Any]]] = {
        "put": (
            lambda props: Entity.objects.create(**props),
            lambda n: [writer_properties(next(written), "ab") for _ in range(n)],
        ),
        "bulk_put": (
            lambda batch: Entity.objects.bulk_put(batch, batch_size=500),
            lambda n: [
                [writer_properties(next(written), "ab-bulk") for _ in range(500)] for _ in range(n)
            ],
        ),
        "get": (get.get_contenders(bench, 1)[0].op, lambda n: get.random_ids(bench, n)),
        "get_many": (
            lambda batch: [
                e["title"] for e in Entity.objects.get_many([i for i, _ in batch]).values()
            ],
            lambda n: [get.random_ids(bench, 100) for _ in range(n)],
        ),
        "query_page": (
            query.page_contenders(bench, 1)[0].op,
            lambda n: query.random_users(bench, n),
        ),
        "query_all": (
            query.all_contenders(bench, 1, 0)[0].op,
            lambda n: query.random_users(bench, n),
        ),
    }
    # ``--raw``: the same ops by hand (bench/raw.py), asked of the working tree's child.
    raw = bench.raw
    raw_ops: dict[str, Callable[[Any], Any]] = {
        "put": raw.put,
        "bulk_put": raw.put_batch,
        "get": get.get_contenders(bench, 1)[1].op,
        "get_many": lambda batch: raw.get_many([r for _, r in batch]),
        "query_page": query.page_contenders(bench, 1)[1].op,
        "query_all": raw.all_of_user,
    }
    for leg, op in raw_ops.items():
        ops[f"{leg}:raw"] = (op, ops[leg][1])
    print(json.dumps({"ready": schemaless_store.__file__}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        op, make_args = ops[request["leg"]]
        bench.rng.seed(request["seed"])
        args = make_args(request["ops"])
        latencies = []
        cpu = time.process_time()
        for arg in args:
            start = time.perf_counter()
            op(arg)
            latencies.append(time.perf_counter() - start)
        cpu = time.process_time() - cpu
        print(json.dumps({"latencies": latencies, "cpu": cpu}), flush=True)
    return 0


# --- the parent --------------------------------------------------------------------------------


class Version:
    """A child process running one version of the store."""

    def __init__(self, name: str, cwd: Path, size: int, *, receipts: bool = True) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        env["BENCH_AB_RECEIPTS"] = "on" if receipts else "off"
        # ``python -m`` puts the working directory first on sys.path: its schemaless_store wins.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.ab", "--child", "--entities", str(size)],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = json.loads(self.readline())
        self.package = ready["ready"]

    def readline(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} child stopped (exit {self.process.wait()})")
        return line

    def time(self, leg: str, ops: int, seed: int) -> tuple[list[float], float]:
        """The latencies of ``ops`` ops, and the child's CPU time over them (its threads'
        included): the client's own work, which the machine's other load barely moves."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"leg": leg, "ops": ops, "seed": seed}) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.readline())
        return reply["latencies"], reply["cpu"]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def old_tree(rev: str, into: Path) -> Path:
    """``schemaless_store`` as it was at ``rev``, unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", rev, "schemaless_store"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def load(size: int) -> None:
    """Migrate and load ``size`` entities (the working tree's code), in a child of its own."""
    code = (
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        "from django.core.management import call_command\n"
        "from bench import peer, plan\n"
        "from bench.context import Bench\n"
        "from bench.data import stages\n"
        "from bench.load import load_stage\n"
        "from bench.raw import RawStore, connect\n"
        "call_command('migrateall', verbosity=0)\n"
        "conn = connect(settings.DATABASES['peer']); peer.create(conn)\n"
        "bench = Bench(plan=plan.FULL, servers=[], raw=RawStore(settings.DATABASES),\n"
        "              peer=peer.Peer(conn))\n"
        f"for stage in stages([{size}]): load_stage(bench, stage)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def throughput(latencies: list[float], units: int) -> float:
    return units * len(latencies) / sum(latencies)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("--before", help="the git revision to compare against")
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--ops", type=float, default=1.0, help="scale every leg's ops per round")
    parser.add_argument("--legs", default=",".join(LEGS))
    parser.add_argument(
        "--raw",
        action="store_true",
        help="also time raw mysqlclient (bench/raw.py) in each round: ratios against it too",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.entities)
    if not args.before:
        parser.error("--before REV is required")
    legs = [leg for leg in args.legs.split(",") if leg]
    unknown = set(legs) - set(LEGS)
    if unknown:
        parser.error(f"unknown legs {sorted(unknown)}; legs: {','.join(LEGS)}")
    receipts_off = args.before == RECEIPTS_OFF
    rev = (
        "receipts off"
        if receipts_off
        else subprocess.run(
            ["git", "rev-parse", "--short", args.before], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    after = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    from .run import start_databases

    servers = start_databases(plans.FULL.buffer_pool)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        before_dir = ROOT if receipts_off else old_tree(args.before, Path(tmp))
        print(f"bench.ab: loading {args.entities:,} entities", flush=True)
        load(args.entities)
        versions = {
            "before": Version("before", before_dir, args.entities, receipts=not receipts_off),
            "after": Version("after", ROOT, args.entities),
        }
        if versions["before"].package == versions["after"].package and not receipts_off:
            raise RuntimeError("both children import the same schemaless_store")
        names = ["before", "after", "raw"] if args.raw else ["before", "after"]
        samples: dict[str, dict[str, list[list[float]]]] = {
            leg: {name: [] for name in names} for leg in legs
        }
        cpu: dict[str, dict[str, list[float]]] = {leg: {name: [] for name in names} for leg in legs}
        try:
            for number in range(args.rounds):
                shift = number % len(names)
                order = names[shift:] + names[:shift]
                for leg in legs:
                    ops = max(1, round(OPS[leg] * args.ops))
                    for name in order:
                        version, asked = (
                            (versions["after"], f"{leg}:raw")
                            if name == "raw"
                            else (versions[name], leg)
                        )
                        found, spent = version.time(asked, ops, seed=number)
                        samples[leg][name].append(found)
                        cpu[leg][name].append(spent / ops * 1e6)
                print(f"bench.ab: round {number + 1} of {args.rounds} done", flush=True)
        finally:
            for version in versions.values():
                version.close()
            for server in servers:
                server.stop()
    rows = []
    for leg in legs:
        units = 500 if leg == "bulk_put" else 1
        ratios = [
            throughput(a, units) / throughput(b, units)
            for a, b in zip(samples[leg]["after"], samples[leg]["before"], strict=True)
        ]
        p50 = {
            name: statistics.median(statistics.median(r) for r in samples[leg][name]) * 1000
            for name in ("before", "after")
        }
        cpu_ratios = [a / b for a, b in zip(cpu[leg]["after"], cpu[leg]["before"], strict=True)]
        against_raw = {}
        if args.raw:
            for name in ("before", "after"):
                against_raw[f"{name}_over_raw"] = statistics.median(
                    throughput(a, units) / throughput(b, units)
                    for a, b in zip(samples[leg][name], samples[leg]["raw"], strict=True)
                )
            against_raw["cpu_us_raw"] = statistics.median(cpu[leg]["raw"])
            against_raw["p50_ms_raw"] = (
                statistics.median(statistics.median(r) for r in samples[leg]["raw"]) * 1000
            )
        rows.append(
            {
                **against_raw,
                "leg": leg,
                "ratio_after_over_before": statistics.median(ratios),
                "cpu_us_before": statistics.median(cpu[leg]["before"]),
                "cpu_us_after": statistics.median(cpu[leg]["after"]),
                "cpu_ratio_after_over_before": statistics.median(cpu_ratios),
                "ratios": ratios,
                "p50_ms_before": p50["before"],
                "p50_ms_after": p50["after"],
                "ops_per_round": len(samples[leg]["after"][0]),
            }
        )
    report = {
        "before": rev,
        "after": after,
        "entities": args.entities,
        "rounds": args.rounds,
        "started": started.isoformat().replace("+00:00", "Z"),
        "loadavg_end": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "legs": rows,
    }
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"ab-{stamp}.json"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        f"# A/B: {rev} (before) vs {after} (after), {args.entities:,} entities, "
        f"{args.rounds} rounds",
        "",
        "| leg | after / before (median of rounds) | min-max over rounds | p50 before ms | "
        "p50 after ms | client CPU us/op before | after | after / before |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['leg']} | {row['ratio_after_over_before']:.3f}x | "
            f"{min(row['ratios']):.2f}-{max(row['ratios']):.2f} | {row['p50_ms_before']:.3f} | "
            f"{row['p50_ms_after']:.3f} | {row['cpu_us_before']:,.0f} | "
            f"{row['cpu_us_after']:,.0f} | {row['cpu_ratio_after_over_before']:.3f}x |"
        )
    if args.raw:
        lines += [
            "",
            "Against raw mysqlclient in the same rounds (throughput ratio, median of rounds; "
            "client CPU per op):",
            "",
            "| leg | before / raw | after / raw | raw p50 ms | raw client CPU us/op |",
            "|---|---|---|---|---|",
        ]
        for row in rows:
            lines.append(
                f"| {row['leg']} | {row['before_over_raw']:.3f}x | {row['after_over_raw']:.3f}x "
                f"| {row['p50_ms_raw']:.3f} | {row['cpu_us_raw']:,.0f} |"
            )
    md_path = args.out / f"ab-{stamp}.md"
    md_path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"bench.ab: wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
