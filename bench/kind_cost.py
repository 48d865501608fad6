"""``python -m bench.kind_cost``: what a kind (docs/kinds.md) costs over a plain ``Entity``.

    .venv/bin/python -m bench.kind_cost --entities 2000

On the benchmark's MariaDB servers, in one run: the same properties (the write legs' entity:
user, time, title, link, text) stored as plain entities and as instances of a kind with those
five fields. Timed in small blocks, alternating Entity and kind (31 blocks a side: the machine's
other load shifts both alike), as the median block's wall time per op, with this process's CPU
per op beside it (where a kind's extra work shows: the database's share is the same):

- ``get``: ``Entity.objects.get(id=...)["title"]`` against ``BenchEntry.objects.get(id=...)
  .title`` (a get that reads a property: the kind checks the stored kind, which reads the body);
- ``save (insert)``: ``Entity(**p).save()`` against ``BenchEntry(**p).save()`` (which runs
  ``full_clean()`` first);
- ``save (update)``: a fetched instance's title changed and saved.

The target (issue 38) is at most 5% more per op; the last column says whether it is met.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TARGET = 1.05
BLOCKS = 31


def per_op(op: Callable[[Any], Any], args: list[Any]) -> float:
    started = time.perf_counter()
    for arg in args:
        op(arg)
    return (time.perf_counter() - started) / len(args) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kind_cost")
    parser.add_argument("--entities", type=int, default=2000, help="entities of each sort")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="output directory")
    args = parser.parse_args(argv)
    started = dt.datetime.now(dt.UTC).replace(microsecond=0)

    from . import plan as plans
    from .data import writer_properties
    from .run import setup

    bench = setup(plans.choose(quick=True))

    from django.db import models

    from schemaless_store.kinds import Kind
    from schemaless_store.models import Entity

    class BenchEntry(Kind):
        user_id = models.BigIntegerField()
        published = models.BigIntegerField()
        title = models.CharField(max_length=200)
        link = models.URLField(max_length=200)
        text = models.TextField()

        class Meta:
            app_label = "benchapp"

    counter = itertools.count()
    n = args.entities
    print(f"bench: storing {n} plain entities and {n} of a kind", flush=True)
    plain = Entity.objects.bulk_put([writer_properties(next(counter), "plain") for _ in range(n)])
    typed = BenchEntry.objects.bulk_put(
        [writer_properties(next(counter), "kind") for _ in range(n)]
    )
    plain_ids = [e.id for e in plain]
    typed_ids = [e.id for e in typed]

    def update(model: Any) -> Callable[[Any], Any]:
        def op(ident: Any) -> None:
            found = model.objects.get(id=ident)
            found["title"] = f"changed {next(counter)}"
            found.save()

        return op

    ops: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[bool], Any]]] = {
        "get": (
            lambda i: Entity.objects.get(id=i)["title"],
            lambda i: BenchEntry.objects.get(id=i).title,
            lambda is_kind: random.sample(typed_ids if is_kind else plain_ids, 101),
        ),
        "save (insert)": (
            lambda p: Entity(**p).save(),
            lambda p: BenchEntry(**p).save(),
            lambda is_kind: [writer_properties(next(counter), "w") for _ in range(26)],
        ),
        "save (update)": (
            update(Entity),
            update(BenchEntry),
            lambda is_kind: random.sample(typed_ids if is_kind else plain_ids, 26),
        ),
    }
    lines = [
        f"# A kind's cost over Entity, {started.isoformat()} (MariaDB, {n:,} entities of each; "
        f"{BLOCKS} alternating blocks per side, per op: the median block's wall time, and this "
        "process's CPU over all blocks)",
        "",
        "| operation | Entity wall us | kind wall us | wall ratio | Entity CPU us | kind CPU us "
        "| target: wall <= 1.05 |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    met = True
    for name, (entity_op, kind_op, make_args) in ops.items():
        walls: dict[bool, list[float]] = {False: [], True: []}
        cpu = {False: 0.0, True: 0.0}
        ops_done = {False: 0, True: 0}
        for block in range(BLOCKS):
            order = (False, True) if block % 2 == 0 else (True, False)
            for is_kind in order:
                op = kind_op if is_kind else entity_op
                arguments = list(make_args(is_kind))
                op(arguments[0])  # warm
                cpu_start = time.process_time()
                walls[is_kind].append(per_op(op, arguments[1:]))
                cpu[is_kind] += time.process_time() - cpu_start
                ops_done[is_kind] += len(arguments) - 1
        median = {k: statistics.median(v) for k, v in walls.items()}
        per_cpu = {k: cpu[k] / ops_done[k] * 1e6 for k in cpu}
        ratio = median[True] / median[False]
        met = met and ratio <= TARGET
        lines.append(
            f"| {name} | {median[False]:,.0f} | {median[True]:,.0f} | {ratio:.3f} | "
            f"{per_cpu[False]:,.0f} | {per_cpu[True]:,.0f} | "
            f"{'met' if ratio <= TARGET else 'MISSED'} |"
        )
        print(lines[-1], flush=True)
    bench.raw.close()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"kinds-{started.strftime('%Y%m%dT%H%M%SZ')}.md"
    path.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"bench: wrote {path}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
