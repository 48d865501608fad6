"""One YCSB client process: ``python -m bench.ycsb.worker <contender>``, driven by
:mod:`bench.ycsb.run` over its stdin and stdout, one JSON line each way:

- ``{"cmd": "run", "ops": [[kind, keynum, field, length], ...]}``: runs them in order, answers
  ``{"lat": {kind: [seconds, ...]}, "wall": seconds, "cache": {...}}``;
- ``{"cmd": "quit"}``.

A process per contender keeps each one's settings (the near cache on or off) for the whole run,
as a server process would: the near cache is never switched off and on between rounds, and it
stays as warm as the workload makes it. The environment is the bench's (``bench.settings``),
plus ``BENCH_YCSB_JSON_URL`` and ``BENCH_YCSB_RAW_URL``; ``BENCH_YCSB_CODEC=json`` writes the
store's bodies as JSON, and ``BENCH_YCSB_SERVER_UPDATES=0`` sends every partial update the
read-under-lock route (issue 45, item 2: the same code with the server's route off).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from .clients import NAMESPACES, Client, JsonClient, RawClient, StoreClient


def make(contender: str) -> Client:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    django.setup()
    from django.conf import settings

    from schemaless_store.config.dburls import database_from_url

    if contender == "json":
        return JsonClient(database_from_url(os.environ["BENCH_YCSB_JSON_URL"]))
    if contender == "raw":
        return RawClient(database_from_url(os.environ["BENCH_YCSB_RAW_URL"]))
    if contender not in NAMESPACES:
        raise SystemExit(f"unknown contender {contender!r}")
    from django.test.utils import override_settings

    if os.environ.get("BENCH_YCSB_CODEC") == "json":  # JSON bodies (issue 45)
        codec = "schemaless_store.values.codec.JsonCodec"
        override_settings(SCHEMALESS={**settings.SCHEMALESS, "CODEC": codec}).enable()
    if os.environ.get("BENCH_YCSB_SERVER_UPDATES") == "0":
        # The A/B of issue 45 item 2: every partial update takes the read-under-lock route.
        from schemaless_store.writes import server_updates

        server_updates.applies_here = lambda key: False  # type: ignore[assignment]
    if contender in ("store_near", "store_redis"):
        near = {"MAX_ENTRIES": int(os.environ.get("BENCH_YCSB_NEAR_ENTRIES", "100000"))}
        override_settings(
            SCHEMALESS={
                **settings.SCHEMALESS,
                "CACHE": "entities",
                "NEAR_CACHE": near if contender == "store_near" else None,
            }
        ).enable()
    elif contender == "store_history":
        override_settings(SCHEMALESS={**settings.SCHEMALESS, "HISTORY": True}).enable()
    return StoreClient(NAMESPACES[contender])


def cache_stats() -> dict[str, Any]:
    from dataclasses import asdict

    from schemaless_store.cache import entity_cache, near_cache

    out: dict[str, Any] = asdict(entity_cache.stats)
    near = near_cache.existing()
    if near is not None:
        out["near"] = asdict(near.stats)
    return out


def count(client: Client, ops: list[Any]) -> dict[str, dict[str, float]]:
    """Round trips per operation, by kind: MariaDB's (statements, commits: every call of a
    mysqlclient connection that talks to the server, as ``bench.profile`` counts them) and
    Redis's (commands and pipelines this thread sends; the near cache's own thread is not
    counted). Untimed: the spies cost time."""
    import threading

    from redis.connection import AbstractConnection

    from ..profile import statements

    sent_redis: list[int] = []
    original = AbstractConnection.send_packed_command

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is threading.main_thread():
            sent_redis.append(1)
        return original(self, *args, **kwargs)

    totals: dict[str, dict[str, float]] = {}
    AbstractConnection.send_packed_command = spy  # type: ignore[method-assign]
    try:
        for op in ops:
            sent_redis.clear()
            with statements() as sent:
                client.do(tuple(op))  # type: ignore[arg-type]
            kind = totals.setdefault(op[0], {"ops": 0, "mariadb": 0, "redis": 0})
            kind["ops"] += 1
            kind["mariadb"] += len(sent)
            kind["redis"] += len(sent_redis)
    finally:
        AbstractConnection.send_packed_command = original  # type: ignore[method-assign]
    return {
        kind: {"mariadb": t["mariadb"] / t["ops"], "redis": t["redis"] / t["ops"]}
        for kind, t in totals.items()
    }


def main(contender: str) -> int:
    client = make(contender)
    clock = time.perf_counter
    profile_to = os.environ.get("BENCH_YCSB_PROFILE")  # a directory: cProfile of each client
    profiler = None
    if profile_to:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    print(json.dumps({"ready": contender}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        if command["cmd"] == "quit":
            break
        if command["cmd"] == "count":
            print(json.dumps({"round_trips": count(client, command["ops"])}), flush=True)
            continue
        latencies: dict[str, list[float]] = {}
        started = clock()
        for op in command["ops"]:
            before = clock()
            client.do(tuple(op))  # type: ignore[arg-type]
            latencies.setdefault(op[0], []).append(clock() - before)
        wall = clock() - started
        answer = {"lat": latencies, "wall": wall}
        if contender.startswith("store"):
            answer["cache"] = cache_stats()
        print(json.dumps(answer), flush=True)
    client.close()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(os.path.join(profile_to, f"{contender}-{os.getpid()}.prof"))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
