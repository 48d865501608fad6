"""Many clients (issue 20 part 3): 4 client processes on a mixed workload, ours against raw.

Every other leg is one client thread. Here :data:`PROCESSES` client processes (a process pool,
``spawn``, each with Django set up and its own connections) run the same mix of operations at
once, for ``plan.clients_s`` seconds per contender per round:

- 40% ``get`` of a random entity of the data set;
- 20% ``get_many`` of :data:`MANY` random ids;
- 20% a page: the :data:`PAGE` newest entities of a random user
  (``filter_index(user_id=u).order_by("-published")[:30]``);
- 20% writes: ``Entity.objects.create`` of a new entity (entity + 2 index rows).

Raw does the same operations through :class:`bench.raw.RawStore` (mysqlclient, by hand), built
in each client process. Both sides decode every body they read, as the single-client legs do.
In a round each client draws its operations from a seeded generator, the same seed for ours
and raw, so both run the same sequence (as far as each gets in the time).

Rounds alternate the contenders (the order rotates); the clients start together (a barrier) and
each reports its window and its latencies. Throughput is the ops of all clients over the wall
time of the round (the first client's start to the last client's end); the ratio ours/raw is
taken per round and the median over rounds is reported, as :func:`bench.stats.ratios` does.
Latency percentiles are over every op of every round. The pool lives across the rounds: process
start-up and Django's set-up are not what is measured.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import statistics
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from ..context import Bench
from ..stats import percentile

PROCESSES = 4
MANY = 10
PAGE = 30
# Cumulative shares of the mix, in order: get, get_many, page, write.
MIX = (("get", 0.4), ("get_many", 0.6), ("page", 0.8), ("write", 1.0))
WARMUP_S = 0.3
BARRIER_TIMEOUT_S = 120.0  # the first round waits for 4 fresh processes to set Django up
WRITE_TAG = "clients"

# --- the client processes ---------------------------------------------------------------------

_barrier: Any = None
_sizes: list[int] = []
_raw: Any = None


def _init(barrier: Any, sizes: list[int]) -> None:
    """A client process: Django set up, the data set's stages known (``entity_id`` needs them)."""
    global _barrier, _sizes
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from ..data import stages

    stages(sizes)
    _barrier, _sizes = barrier, sizes


def _raw_store() -> Any:
    global _raw
    if _raw is None:
        from django.conf import settings

        from ..raw import RawStore

        _raw = RawStore(settings.DATABASES)
    return _raw


def _operations(contender: str) -> dict[str, Any]:
    """The four operations of the mix for ``contender`` ("ours" or "raw")."""
    if contender == "raw":
        raw = _raw_store()

        def raw_get(ids: list[uuid.UUID]) -> None:
            raw.get(ids[0].bytes)["title"]

        def raw_get_many(ids: list[uuid.UUID]) -> None:
            raw.get_many([i.bytes for i in ids])

        return {
            "get": raw_get,
            "get_many": raw_get_many,
            "page": lambda user: raw.page(user, PAGE),
            "write": raw.put,
        }
    from schemaless_store.models import Entity

    def get(ids: list[uuid.UUID]) -> None:
        Entity.objects.get(id=ids[0])["title"]

    def get_many(ids: list[uuid.UUID]) -> None:
        for entity in Entity.objects.get_many(ids).values():
            entity["title"]

    def page(user: int) -> list[dict[str, Any]]:
        found = list(Entity.objects.filter_index(user_id=user).order_by("-published")[:PAGE])
        return [entity.body_properties() for entity in found]

    def write(properties: dict[str, Any]) -> None:
        Entity.objects.create(**properties)

    return {"get": get, "get_many": get_many, "page": page, "write": write}


def _client(contender: str, seed: int, seconds: float) -> dict[str, Any]:
    """One client's turn: wait for the others, then run the mix for ``seconds``."""
    from ..data import entity_id, stages, writer_properties

    ops = _operations(contender)
    loaded = stages(_sizes)
    size = loaded[-1].hi
    weights = [s.users for s in loaded]
    rng = random.Random(seed)
    written = itertools.count(seed * 10**5)  # the new entities' numbers (user, title)

    def random_user() -> int:
        stage = rng.choices(loaded, weights=weights)[0]
        return stage.first_user + rng.randrange(stage.users)

    def ids(n: int) -> list[uuid.UUID]:
        return [uuid.UUID(bytes=entity_id(rng.randrange(size))) for _ in range(n)]

    latencies: list[float] = []
    kinds: list[str] = []
    clock = time.perf_counter
    _barrier.wait(BARRIER_TIMEOUT_S)
    start = time.monotonic()
    deadline = clock() + seconds
    while clock() < deadline:
        draw = rng.random()
        kind = next(name for name, bound in MIX if draw < bound)
        arg: Any
        if kind == "get":
            arg = ids(1)
        elif kind == "get_many":
            arg = ids(MANY)
        elif kind == "page":
            arg = random_user()
        else:
            arg = writer_properties(next(written), WRITE_TAG)
        began = clock()
        ops[kind](arg)
        latencies.append(clock() - began)
        kinds.append(kind)
    return {
        "start": start,
        "end": time.monotonic(),
        "latencies": latencies,
        "kinds": kinds,
        "pid": os.getpid(),
    }


def _check(user: int) -> int:
    """Ours and raw answer the same page for ``user`` in a client process; its length."""
    ours = [p["title"] for p in _operations("ours")["page"](user)]
    raw = [p["title"] for p in _operations("raw")["page"](user)]
    if ours != raw:
        raise AssertionError(f"user {user}: ours answered {ours[:3]}..., raw {raw[:3]}...")
    return len(ours)


# --- the leg ----------------------------------------------------------------------------------


def _turn(pool: ProcessPoolExecutor, contender: str, seed: int, seconds: float) -> dict[str, Any]:
    """All clients run ``contender`` at once; their windows, latencies and op counts merged."""
    futures = [
        pool.submit(_client, contender, seed * 100 + client, seconds) for client in range(PROCESSES)
    ]
    found = [f.result() for f in futures]
    pids = {r["pid"] for r in found}
    if len(pids) != PROCESSES:  # the barrier makes this impossible; say so if it is not
        raise AssertionError(f"{PROCESSES} clients ran in {len(pids)} processes")
    latencies = [x for r in found for x in r["latencies"]]
    kinds = [k for r in found for k in r["kinds"]]
    wall = max(r["end"] for r in found) - min(r["start"] for r in found)
    return {"latencies": latencies, "kinds": kinds, "ops": len(latencies), "wall_s": wall}


def _summary(turns: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [x for t in turns for x in t["latencies"]]
    wall = sum(t["wall_s"] for t in turns)
    by_kind: dict[str, list[float]] = {name: [] for name, _share in MIX}
    for t in turns:
        for kind, latency in zip(t["kinds"], t["latencies"], strict=True):
            by_kind[kind].append(latency)
    return {
        "ops": len(latencies),
        "units_per_op": 1,
        "throughput_per_s": len(latencies) / wall if wall else float("nan"),
        "p50_ms": percentile(latencies, 50) * 1000,
        "p99_ms": percentile(latencies, 99) * 1000,
        "max_ms": max(latencies) * 1000 if latencies else float("nan"),
        "clients": PROCESSES,
        "seconds": wall,
        "by_kind": {
            kind: {
                "ops": len(found),
                "p50_ms": percentile(found, 50) * 1000,
                "p99_ms": percentile(found, 99) * 1000,
            }
            for kind, found in by_kind.items()
        },
    }


def _ratios(ours: list[dict[str, Any]], base: list[dict[str, Any]]) -> dict[str, Any]:
    n = min(len(ours), len(base))
    throughput = [
        (ours[k]["ops"] / ours[k]["wall_s"]) / (base[k]["ops"] / base[k]["wall_s"])
        for k in range(n)
    ]
    p50 = [
        percentile(ours[k]["latencies"], 50) / percentile(base[k]["latencies"], 50)
        for k in range(n)
    ]
    return {
        "throughput": statistics.median(throughput),
        "p50_latency": statistics.median(p50),
        "rounds": n,
        "throughput_per_round": throughput,
    }


def shard_servers() -> int:
    """How many database servers hold the store's buckets (``bench.run --servers``)."""
    from django.conf import settings

    from schemaless_store.topology import bucket_map

    owners = set(bucket_map.current().owners)
    return len({(settings.DATABASES[a]["HOST"], settings.DATABASES[a]["PORT"]) for a in owners})


def entities_per_shard(bench: Bench) -> dict[str, int]:
    """Rows of ``entities`` on each shard: with ``--servers 1``, shard_1 holds none."""
    counts = {}
    for alias, conn in bench.raw.entity_conns.items():
        cursor = conn.cursor()
        cursor.execute("SELECT COUNT(*) FROM entities")
        counts[alias] = cursor.fetchone()[0]
    return counts


def run(bench: Bench) -> list[dict[str, Any]]:
    from django.conf import settings

    plan = bench.plan
    servers = shard_servers()
    placed = entities_per_shard(bench)  # the data set, before the leg's writes
    context = multiprocessing.get_context("spawn")
    sizes = [stage.hi for stage in bench.loaded]
    turns: dict[str, list[dict[str, Any]]] = {"ours": [], "raw": []}
    with ProcessPoolExecutor(
        max_workers=PROCESSES,
        mp_context=context,
        initializer=_init,
        initargs=(context.Barrier(PROCESSES), sizes),
    ) as pool:
        started = time.perf_counter()
        for contender in turns:  # processes, connections, code paths: not what is measured
            _turn(pool, contender, seed=0, seconds=WARMUP_S)
        bench.log(f"clients: {PROCESSES} processes ready in {time.perf_counter() - started:.1f} s")
        hits = pool.submit(_check, bench.random_user()).result()
        contenders = list(turns)
        for number in range(plan.clients_rounds):
            shift = number % len(contenders)
            for contender in contenders[shift:] + contenders[:shift]:
                turns[contender].append(_turn(pool, contender, number + 1, plan.clients_s))
    ratio = _ratios(turns["ours"], turns["raw"])
    summaries = {name: _summary(found) for name, found in turns.items()}
    bench.log(
        f"clients_mixed ({servers} server{'s' if servers > 1 else ''}): ours "
        f"{summaries['ours']['throughput_per_s']:,.0f} ops/s, raw "
        f"{summaries['raw']['throughput_per_s']:,.0f} ops/s, ours/raw {ratio['throughput']:.2f}x"
    )
    return [
        {
            "leg": "clients_mixed",
            "size": bench.size,
            "servers": servers,
            "shards": settings.SCHEMALESS["SHARDS"],
            "entities_per_shard": placed,
            "clients": PROCESSES,
            "seconds_per_turn": plan.clients_s,
            "hits": hits,
            "what": f"{PROCESSES} client processes at once, each for {plan.clients_s:g} s per "
            f"turn: 40% get, 20% get_many({MANY}), 20% page of {PAGE} by user_id, 20% create "
            "(entity + 2 index rows), vs raw mysqlclient doing the same ops; bodies decoded; "
            f"{'all buckets on one shard server' if servers == 1 else 'two shard servers'}",
            "contenders": summaries,
            "ratios": {"ours/raw": ratio},
        }
    ]
