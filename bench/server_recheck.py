"""``python -m bench.server_recheck``: a page's cost with the re-check on the server against the
re-check in Python (issue 45, item 4; docs/performance.md), on JSON bodies in both.

Two throwaway MariaDB servers (``bench.run``'s layout, two shards), the store with
``JsonCodec``; users with ``--per-user`` entries each (``user_id``, ``published``, a title),
half of the users' entries placed with ``user_id`` (a pinned page joins them to its scan: one
statement) and half not (the scan, then the fetch from the entities' shards). Of every user's
entries ``--stale`` percent are then changed behind the index (their ``published`` moved in
the body, the index row left), so each page meets stale rows.

The page is ``filter_index(user_id=u).order_by("-published").page(size=30)``, and each
returned entity's properties are read (a caller reads what it asked for). ``python`` is the
same code with the server's check switched off (``indexquery.server_checks``): the re-check as
it was. For each of (placed, hashed) x (server, python):

- wall time per page, p50 and p90 over ``--pages`` pages of random users, modes alternating
  (one run; the machine's load average is printed beside it: a loaded machine's times are
  not final figures);
- instructions per page in the client, with ``--callgrind N``: a client under
  ``valgrind --tool=callgrind`` reads 10 pages (not counted), then N, and again 2N; only the
  loop is collected (``--toggle-collect=functools_reduce``), the difference over N is one
  page's instructions in the client's thread (not the servers', nor the kernel's).

    .venv/bin/python -m bench.server_recheck [--users 200] [--per-user 100] [--stale 20]
        [--pages 400] [--callgrind 100]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import random
import statistics
import time
from typing import Any

from .callgrind import collected

SIZE = 30
LAYOUTS = ("placed", "hashed")
MODES = ("server", "python")


def json_settings() -> Any:
    from django.conf import settings
    from django.test import override_settings

    return override_settings(
        SCHEMALESS={
            **settings.SCHEMALESS,
            "CODEC": "schemaless_store.values.codec.JsonCodec",
            "MAP_MAX_AGE": 3600,
        }
    )


def users_of(layout: str, users: int) -> range:
    half = users // 2
    return range(1, half + 1) if layout == "placed" else range(half + 1, users + 1)


def load(args: argparse.Namespace) -> None:
    """The entries, then ``--stale`` percent of each user's changed behind the index."""
    from django.db import connections

    from schemaless_store.models import Entity
    from schemaless_store.values.codec import JsonCodec

    rng = random.Random(45)
    codec = JsonCodec()
    for layout in LAYOUTS:
        for user in users_of(layout, args.users):
            bags = [
                {"user_id": user, "published": n, "title": f"entry {n} of {user} " + "x" * 80}
                for n in range(args.per_user)
            ]
            made = Entity.objects.bulk_put(
                bags, placed_with="user_id" if layout == "placed" else None
            )
            for entity in rng.sample(made, args.per_user * args.stale // 100):
                bag = {**entity.body_properties(), "published": entity["published"] + 10_000}
                with connections[entity._state.db].cursor() as cursor:
                    cursor.execute(
                        "UPDATE entities SET body = %s WHERE id = %s",
                        (codec.encode(bag), entity.id.bytes),
                    )


def page(user: int) -> int:
    from schemaless_store.models import Entity

    found = Entity.objects.filter_index(user_id=user).order_by("-published").page(size=SIZE)
    for entity in found:
        entity.body_properties()
    return len(found)


def switched(mode: str) -> None:
    from schemaless_store.query import indexquery

    if mode == "python":
        indexquery.server_checks = lambda query: False


def child(layout: str, mode: str, n: int, users: int) -> int:
    """Under callgrind: 10 pages, then ``n`` inside ``functools.reduce`` (the collected part)."""
    import django

    django.setup()
    with json_settings():
        switched(mode)
        rng = random.Random(n)
        pool = list(users_of(layout, users))
        for _ in range(10):
            assert page(rng.choice(pool)) == SIZE
        picked = [rng.choice(pool) for _ in range(n)]
        gc.disable()
        functools.reduce(lambda total, user: total + page(user), picked, 0)
    return 0


def instructions(layout: str, mode: str, n: int, users: int) -> float:
    counts = []
    for size in (n, 2 * n):
        counts.append(collected("bench.server_recheck", layout, mode, str(size), str(users)))
    return (counts[1] - counts[0]) / n


def timings(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    from schemaless_store.query import indexquery

    checks = indexquery.server_checks
    rng = random.Random(7)
    lat: dict[str, list[float]] = {f"{lay}/{mode}": [] for lay in LAYOUTS for mode in MODES}
    for number in range(args.pages):
        for layout in LAYOUTS:
            user = rng.choice(list(users_of(layout, args.users)))
            order = MODES if number % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                indexquery.server_checks = checks if mode == "server" else (lambda q: False)
                start = time.perf_counter()
                assert page(user) == SIZE
                lat[f"{layout}/{mode}"].append(time.perf_counter() - start)
    indexquery.server_checks = checks
    return {
        name: {
            "p50_ms": statistics.median(values) * 1000,
            "p90_ms": statistics.quantiles(values, n=10)[-1] * 1000,
        }
        for name, values in lat.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server_recheck", description=__doc__)
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--per-user", type=int, default=100)
    parser.add_argument("--stale", type=int, default=20, help="percent of entries changed")
    parser.add_argument("--pages", type=int, default=400)
    parser.add_argument("--callgrind", type=int, default=0)
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="placed,hashed")
    parser.add_argument("--child", nargs=4)
    args = parser.parse_args(argv)
    if args.child:
        layout, mode, n, users = args.child
        return child(layout, mode, int(n), int(users))
    from .run import start_databases

    start_databases("256M")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrateall", verbosity=0)
    load_before = os.getloadavg()
    with json_settings():
        load(args)
        result: dict[str, Any] = {"timings": timings(args)}
    if args.callgrind:
        result["instructions"] = {
            f"{layout}/{mode}": instructions(layout, mode, args.callgrind, args.users)
            for layout in args.layouts.split(",")
            for mode in MODES
        }
    result["load"] = [load_before, os.getloadavg()]
    result["args"] = {k: v for k, v in vars(args).items() if k != "child"}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
