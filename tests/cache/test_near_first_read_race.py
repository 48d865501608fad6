"""A near-cache copy from a first read that no invalidation could reach (found by the history
checker: docs/reliability.md, "Issue 43's workload and faults: short runs", cause 1; fixed by
copying no row read from the database: docs/cache.md#no-copy-from-a-first-read).

With Redis paused, a reader's script (which sets the id's token: a miss) and another write's
``DEL`` of that token wait in Redis's sockets together, so Redis runs them in one turn and names
the id in one push. The reader then reads the shard (the first write's row) and copies it. A
second write commits and deletes the token, which is gone already: nothing is pushed, and once
every push is applied the next read is served the first write's row from process memory. Before
the fix, runs of 12 or 20 tries had 1 to 9 stale reads each (SQLite and MariaDB; which of the
two commands Redis runs first varies, and only script-then-DEL shows it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.core.cache import caches

from schemaless_store.cache import entity_cache
from schemaless_store.models import Entity
from tests.cache.test_near_cache import near, redis_server, sneak  # noqa: F401  (the fixture)
from tests.support import STORE

pytestmark = STORE
TRIES = 30


def delete(token: str) -> None:
    """Another client's DEL (``caches`` is per thread: a connection of its own, opened now)."""
    caches["entities"].delete(token)


def read_into(found: list[Any], entity_id: Any) -> None:
    found.append(Entity.objects.get(id=entity_id)["n"])


def test_a_first_reads_copy_is_dropped_by_a_later_write_of_another_process(near: Any) -> None:  # noqa: F811
    stale = 0
    for attempt in range(TRIES):
        made = Entity.objects.create(n=1)
        token = "sls:g:" + made.id.bytes.hex()
        first: list[Any] = []
        redis = redis_server()
        redis.pause()
        try:
            reader = threading.Thread(target=read_into, args=(first, made.id))
            reader.start()
            time.sleep(0.2)  # its script waits in Redis's socket
            sneak(made.id, n=2)  # a write commits (the reader's shard read comes after)
            deleter = threading.Thread(target=delete, args=(token,))
            deleter.start()  # that write's DEL, run in the same Redis turn as the script
            time.sleep(0.2)
        finally:
            redis.resume()
        reader.join(5)
        deleter.join(5)
        sneak(made.id, n=3)  # a second write commits after the reader's shard read
        caches["entities"].delete(token)  # its DEL: no token left, so no push
        now = time.monotonic()
        while near.heard() <= now:  # every push Redis sent so far is applied
            time.sleep(0.005)
        entity_cache.reset_stats()
        value = Entity.objects.get(id=made.id)["n"]
        print(
            f"try {attempt}: first read {first}, then {value}, near hits",
            entity_cache.stats.near_hits,
        )
        stale += value != 3
    assert stale == 0, f"{stale} of {TRIES} reads were served a replaced row from the near cache"
