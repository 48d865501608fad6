"""``python -m bench.invalidation_cost``: a write's invalidation (one token's ``DEL``) in
instructions, by each route the entity cache has had
(docs/performance.md#the-near-cache-under-writes-issue-45-item-6): ``redispy``, Django's
``delete_many`` through ``redis.Redis`` (before issue 45, item 6), and ``scripted``, the
thread's own script connection (now).

A throwaway ``redis-server``; for each route a client under ``valgrind --tool=callgrind`` sends
20 ``DEL`` (not counted), then N, and again 2N; only the loop is collected, and
(count(2N) - count(N)) / N is one ``DEL``'s instructions in the client.

    .venv/bin/python -m bench.invalidation_cost [N]       # N = 200
"""

from __future__ import annotations

import sys

from .callgrind import collected

ROUTES = ("redispy", "scripted")


def main() -> int:
    from schemaless_store.testing.redis import start_redis

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    server = start_redis()
    for route in ROUTES:
        counts = []
        for size in (n, 2 * n):
            counts.append(collected("bench.invalidation_cost", route, str(size), server.url))
        print(f"{route}: {(counts[1] - counts[0]) / n:,.0f} instructions per DEL ({counts})")
    return 0


def child(route: str, n: int, url: str) -> int:
    import functools
    import gc

    import django
    from django.conf import settings

    from schemaless_store.cache.backend import cache_from_url

    locmem = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    settings.configure(CACHES={"default": locmem, "entities": cache_from_url(url)})
    django.setup()
    from django.core.cache import caches

    backend = caches["entities"]
    keys = [f"sls:g:{i:032x}" for i in range(n + 20)]
    for key in keys:
        backend.set(key, 1)
    send = backend.delete_many if route == "redispy" else backend.scripted.delete
    for key in keys[:20]:  # connections made, first calls
        send([key])
    gc.collect()
    gc.disable()
    functools.reduce(lambda acc, key: (send([key]), acc)[1], keys[20:], 0)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2], int(sys.argv[3]), sys.argv[4]))
    sys.exit(main())
