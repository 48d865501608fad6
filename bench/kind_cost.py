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
- ``save (update)``: a fetched instance's title changed and saved;
- ``filter() page``: a user's 20 newest, ``list(Entity.objects.filter_index(user_id=u)
  .order_by("-published")[:20])`` against ``list(BenchPage.objects.filter(user_id=u)
  .order_by("-published")[:20])`` (the kind's queryset API over its own index, issue 44);
- ``page + reference``: that kind page, against the same page with ``select_related("writer")``
  reading each entry's writer (a ``ReferenceField``) in one ``get_many``, every writer used.

The target (issues 38 and 44) is at most 5% more per op (1.3x for the page with its
references, against the page without); the last column says whether it is met.
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
PREFETCH_TARGET = 1.3
BLOCKS = 31
# The page legs' users, and the entries of each (of each sort).
PAGE_USERS, PER_USER = 50, 40


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

    from django.core.management import call_command
    from django.db import models

    from schemaless_store import Index
    from schemaless_store.kinds import Kind, ReferenceField
    from schemaless_store.models import Entity
    from schemaless_store.tables import lifecycle

    class BenchEntry(Kind):
        user_id = models.BigIntegerField()
        published = models.BigIntegerField()
        title = models.CharField(max_length=200)
        link = models.URLField(max_length=200)
        text = models.TextField()

        class Meta:
            app_label = "benchapp"

    class BenchWriter(Kind):
        name = models.CharField(max_length=60)

        class Meta:
            app_label = "benchapp"

    class BenchPage(Kind):
        user_id = models.BigIntegerField()
        published = models.BigIntegerField()
        title = models.CharField(max_length=200)
        link = models.URLField(max_length=200)
        text = models.TextField()
        writer = ReferenceField(BenchWriter, null=True)

        class Meta:
            app_label = "benchapp"
            indexes = [
                Index(
                    "index_benchpage_user_published",
                    ["user_id", "published"],
                    shard_on="user_id",
                    types={"published": "int"},
                )
            ]

    call_command("migrateall", verbosity=0)  # the kind's index table
    lifecycle.mark_ready("index_benchpage_user_published")  # no entry of the kind exists yet

    counter = itertools.count()
    n = args.entities
    print(f"bench: storing {n} plain entities and {n} of a kind", flush=True)
    plain = Entity.objects.bulk_put([writer_properties(next(counter), "plain") for _ in range(n)])
    typed = BenchEntry.objects.bulk_put(
        [writer_properties(next(counter), "kind") for _ in range(n)]
    )
    plain_ids = [e.id for e in plain]
    typed_ids = [e.id for e in typed]
    writers = BenchWriter.objects.bulk_put([{"name": f"w{w}"} for w in range(PAGE_USERS)])
    users = [7 * 10**9 + u for u in range(PAGE_USERS)]
    for sort in ("plain", "kind"):
        rows = []
        for k in range(PAGE_USERS * PER_USER):
            row = writer_properties(next(counter), sort)
            row["user_id"] = users[k % PAGE_USERS]
            if sort == "kind":  # each entry of a user by another writer
                row["writer"] = writers[(k // PAGE_USERS) % PAGE_USERS].id
            rows.append(row)
        (BenchPage.objects if sort == "kind" else Entity.objects).bulk_put(rows)

    def entity_page(user: int) -> Any:
        return list(Entity.objects.filter_index(user_id=user).order_by("-published")[:20])

    def kind_page(user: int) -> Any:
        return list(BenchPage.objects.filter(user_id=user).order_by("-published")[:20])

    def referenced_page(user: int) -> Any:
        query = BenchPage.objects.filter(user_id=user).order_by("-published")
        return [entry.writer.name for entry in query.select_related("writer")[:20]]

    def update(model: Any) -> Callable[[Any], Any]:
        def op(ident: Any) -> None:
            found = model.objects.get(id=ident)
            found["title"] = f"changed {next(counter)}"
            found.save()

        return op

    Op = tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[bool], Any]]
    ops: dict[str, Op] = {
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
        "filter() page": (
            entity_page,
            kind_page,
            lambda is_kind: [random.choice(users) for _ in range(26)],
        ),
        "page + reference": (
            kind_page,
            referenced_page,
            lambda is_kind: [random.choice(users) for _ in range(26)],
        ),
    }
    lines = [
        f"# A kind's cost over Entity, {started.isoformat()} (MariaDB, {n:,} entities of each; "
        f"{BLOCKS} alternating blocks per side, per op: the median block's wall time, and this "
        "process's CPU over all blocks)",
        "",
        "| operation | Entity wall us | kind wall us | wall ratio | Entity CPU us | kind CPU us "
        "| target: wall ratio |",
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
        target = PREFETCH_TARGET if name == "page + reference" else TARGET
        met = met and ratio <= target
        lines.append(
            f"| {name} | {median[False]:,.0f} | {median[True]:,.0f} | {ratio:.3f} | "
            f"{per_cpu[False]:,.0f} | {per_cpu[True]:,.0f} | "
            f"{'met' if ratio <= target else 'MISSED'} (<= {target}) |"
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
