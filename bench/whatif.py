"""``python -m bench.whatif``: measure proposed hot-path changes before anyone makes them.

Each experiment is a change to ``schemaless_store`` that the profile suggests, applied here by
monkeypatching, in this process only (the package's files are never touched), so its gain can be
measured against the raw baseline in the same process, on the same data, alternating with the
unchanged code::

    .venv/bin/python -m bench.whatif --entities 100000
    .venv/bin/python -m bench.whatif --entities 200000 --cleaner   # backfill settings instead

For each op, the table shows ours unchanged, ours with each experiment that touches its path, and
ours with all of them. The machine is noisy, so the variants take turns in many short rounds (the
order rotating), raw runs right after each of them, and the table reports medians over rounds:
ours' wall and client CPU per op, and ours/raw throughput computed within each round. These are
measurements of candidate patches, not of the shipped code; each patch must leave the answers
unchanged (checked on a sample before timing).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .profile import ops

Undo = Callable[[], None]


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    ops: tuple[str, ...]
    apply: Callable[[], Undo]
    combine: bool = True  # part of the "all of the above" variant


def _patch(owner: Any, name: str, value: Any) -> Undo:
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    setattr(owner, name, value)
    return lambda: setattr(owner, name, original)


# --- experiments ---------------------------------------------------------------------------


def parallel_fetch() -> Undo:
    """``fetch_by_ids`` reads the shards of any page at once on the scatter threads (as index
    reads already do), not only from ``PARALLEL_FETCH_MIN`` (64) ids, so a page over two shards
    waits for one entity round trip, not two."""
    from schemaless_store.query import fetch

    return _patch(fetch, "PARALLEL_FETCH_MIN", 2)


def no_colocated() -> Undo:
    """A pinned index read does not join the entities of its own shard: every entity comes from
    an ``IN`` query per entity shard, as before the join."""
    from schemaless_store.query.fetch import EntityFetcher

    return _patch(EntityFetcher, "join_entities", False)


def model_init() -> Undo:
    """A new ``Entity`` runs Django's ``Model.__init__`` (its per-field loop), instead of the
    store setting the same field values directly (``models/entity.py``'s ``_init_defaults``),
    so one can see what that shortcut saves on ``create``."""
    from schemaless_store.models import entity

    return _patch(entity, "_init_defaults", lambda cls: {})


def lean_read() -> Undo:
    """Measurement only, never to ship: ``shards.read`` as the bare driver cursor (no Django
    thread-sharing or broken-transaction check, no error translation, no retry of a lost
    connection, no copy of the rows): what those guards cost each read."""
    from django.db import connections

    from schemaless_store.topology import shards

    def read(alias: str, sql: str, params: Any, conn: Any = None) -> Any:
        conn = connections[alias] if conn is None else conn
        if conn.connection is None:
            conn.ensure_connection()
        cursor = conn.connection.cursor()
        cursor.execute(sql, params)
        return cursor.fetchall()

    return _patch(shards, "read", read)


def no_confirm() -> Undo:
    """Measurement only, never to ship: no confirmation of a read against the bucket map
    (``buckets.confirm_read``, a move's safety): what it costs a read when no bucket moves."""
    from schemaless_store.tables import buckets

    return _patch(buckets, "confirm_read", lambda alias, used: None)


EXPERIMENTS: list[Experiment] = [
    Experiment("lean_read", lean_read.__doc__ or "", ("get", "query_page"), lean_read),
    Experiment("no_confirm", no_confirm.__doc__ or "", ("get", "query_page"), no_confirm),
    Experiment("model_init", model_init.__doc__ or "", ("put",), model_init, combine=False),
    Experiment(
        "no_colocated",
        no_colocated.__doc__ or "",
        ("query_page", "query_all"),
        no_colocated,
        combine=False,
    ),
    Experiment(
        "parallel_fetch",
        parallel_fetch.__doc__ or "",
        ("get_many", "query_page", "query_all"),
        parallel_fetch,
    ),
]


@contextlib.contextmanager
def applied(experiments: list[Experiment]) -> Iterator[None]:
    undo = [experiment.apply() for experiment in experiments]
    try:
        yield
    finally:
        for step in reversed(undo):
            step()


def _same(bench: Any, name: str, ours: Callable[[Any], Any], make_arg: Callable[[], Any]) -> Any:
    """What ours returns, made comparable (titles in order), to check a patch changes nothing."""
    if name in ("get_many", "put", "bulk_put"):
        return None
    bench.rng.seed(len(name))
    found = ours(make_arg())
    if isinstance(found, list):
        return [props["title"] for props in found]
    return found


def _timed(op: Callable[[Any], Any], args: list[Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    for arg in args:
        op(arg)
    return time.perf_counter() - wall, time.process_time() - cpu


def compare_variants(
    ours: Callable[[Any], Any],
    raw: Callable[[Any], Any],
    make_arg: Callable[[], Any],
    variants: list[tuple[str, list[Experiment]]],
    n: int,
    rounds: int,
) -> dict[str, dict[str, float]]:
    """Medians over rounds; in each round every variant runs ``n`` ops, then raw runs the same
    ``n`` arguments, and ours/raw throughput is taken from that pair."""
    samples: dict[str, list[tuple[float, float, float]]] = {label: [] for label, _ in variants}
    for number in range(rounds):
        shift = number % len(variants)
        for label, experiments in variants[shift:] + variants[:shift]:
            args = [make_arg() for _ in range(n)]
            with applied(experiments):
                wall, cpu = _timed(ours, args)
            raw_wall, _raw_cpu = _timed(raw, args)
            samples[label].append((wall / n * 1e6, cpu / n * 1e6, raw_wall / wall))
    return {
        label: {
            "wall": statistics.median(s[0] for s in rows),
            "cpu": statistics.median(s[1] for s in rows),
            "ratio": statistics.median(s[2] for s in rows),
        }
        for label, rows in samples.items()
    }


CLEANER_VARIANTS: list[tuple[str, dict[str, str], list[str]]] = [
    ("defaults", {}, []),
    ("--batch-size 500", {}, ["--batch-size", "500"]),
    ("--batch-size 1000", {}, ["--batch-size", "1000"]),
    ("--batch-size 5000", {}, ["--batch-size", "5000"]),
]


def cleaner_variants(bench: Any, rounds: int) -> None:
    """Backfill a fresh index on the loaded store with ``runcleaner`` under each variant (no
    writer), each on a settled server, variants in alternating order; the backfill passes' own
    entities/s as recorded by the cleaner, and the child's peak RSS."""
    import dataclasses
    import os
    import subprocess

    from django.core.management import call_command

    from schemaless_store.config.indexes import Index, registry
    from schemaless_store.models import CleanerPass
    from schemaless_store.tables import lifecycle

    from .load import settle

    bench.plan = dataclasses.replace(bench.plan, settle_s=30.0)
    rates: dict[str, list[float]] = {label: [] for label, _, _ in CLEANER_VARIANTS}
    rss: dict[str, float] = {}
    for number in range(rounds):
        order = CLEANER_VARIANTS if number % 2 == 0 else CLEANER_VARIANTS[::-1]
        for label, extra_env, extra_args in order:
            name = f"index_link_w{number}_{len(rates[label])}_{abs(hash(label)) % 10_000}"
            registry.register(Index(table=name, properties=["link"], shard_on="link"))
            call_command("migrateall", verbosity=0)
            registry.unregister(name)  # declared in the child only: nothing here writes
            settle(bench)
            env = {**os.environ, "BENCH_LINK_INDEX": name, **extra_env}
            command = [sys.executable, "-m", "django", "runcleaner", f"--index={name}", "--once"]
            proc = subprocess.Popen([*command, "-v", "0", *extra_args], env=env)
            while lifecycle.states(refresh=True).get(name) != lifecycle.READY:
                if proc.poll() is not None:
                    raise RuntimeError(f"runcleaner failed under {label}")
                time.sleep(0.05)
            proc.terminate()  # the repair pass that follows is not measured
            _pid, _status, usage = os.wait4(proc.pid, 0)
            passes = list(CleanerPass.objects.filter(index_name=name, kind="backfill"))
            seconds = sum((p.finished - p.started).total_seconds() for p in passes)
            rates[label].append(sum(p.entities_scanned for p in passes) / seconds)
            rss[label] = max(rss.get(label, 0.0), usage.ru_maxrss / 1024)
    print(f"backfill of a new index over {bench.size:,} entities, no writer, {rounds} rounds\n")
    print("| variant | entities/s (median) | each round | peak RSS MiB |")
    print("|---|---:|---|---:|")
    for label, found in rates.items():
        each = ", ".join(f"{r:,.0f}" for r in found)
        print(f"| {label} | {statistics.median(found):,.0f} | {each} | {rss[label]:.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.whatif")
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--ops", default="put,get,get_many,query_page,query_all")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--cleaner", action="store_true", help="compare runcleaner backfill settings instead"
    )
    args = parser.parse_args(argv)

    from . import plan as plans
    from .data import stages
    from .load import load_stage
    from .run import setup

    bench = setup(plans.choose(quick=args.entities < 10_000, sizes=[args.entities]))
    for stage in stages([args.entities]):
        load_stage(bench, stage)
    if args.cleaner:
        cleaner_variants(bench, rounds=min(args.rounds, 3))
        return 0
    table = ops(bench)
    print(
        f"what-if at {bench.size:,} entities; medians over {args.rounds} rounds, raw run "
        "right after each variant in every round\n"
    )
    print("| op | variant | ours wall us/op | ours client CPU us/op | ours/raw throughput |")
    print("|---|---|---:|---:|---:|")
    for name in args.ops.split(","):
        ours, raw, make_arg = table[name]
        n = {"put": 100, "get": 200, "get_many": 10, "query_page": 30, "query_all": 15}[name]
        relevant = [e for e in EXPERIMENTS if name in e.ops]
        variants: list[tuple[str, list[Experiment]]] = [("unchanged", [])]
        variants += [(e.name, [e]) for e in relevant]
        combined = [e for e in relevant if e.combine]
        if len(combined) > 1:
            label = "all of the above" + (
                " but parallel_fetch" if len(combined) < len(relevant) else ""
            )
            variants.append((label, combined))
        reference = None
        for label, experiments in variants:
            with applied(experiments):
                for _ in range(10):
                    ours(make_arg())
                answer = _same(bench, name, ours, make_arg)
            if reference is None:
                reference = answer
            elif answer != reference:
                raise AssertionError(f"{label} changes the answer of {name}")
        found = compare_variants(ours, raw, make_arg, variants, n, args.rounds)
        for label, _ in variants:
            row = found[label]
            print(
                f"| {name} | {label} | {row['wall']:,.0f} | {row['cpu']:,.0f}"
                f" | {row['ratio']:.2f}x |",
                flush=True,
            )
    print("\nExperiments:")
    for experiment in EXPERIMENTS:
        print(f"- {experiment.name}: {' '.join(experiment.description.split())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
