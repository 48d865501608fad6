"""Loading a stage of the data set into the store (``bulk_put``) and the peer (server-side)."""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm import tqdm

from . import peer
from .context import Bench, check_same
from .data import WRITER_USERS, WRITER_USERS_0, Stage

DELETE_CHUNK = 1000


def load_stage(bench: Bench, stage: Stage) -> dict[str, Any]:
    from schemaless_store.models import Entity

    plan = bench.plan
    count = stage.hi - stage.lo
    start = time.perf_counter()
    with tqdm(
        total=count,
        desc=f"load store to {stage.hi:,}",
        unit="ent",
        disable=not sys.stderr.isatty(),
    ) as progress:
        for chunk in stage.chunks(plan.load_chunk):
            Entity.objects.bulk_put(chunk, batch_size=plan.load_batch)
            progress.update(len(chunk))
    store_s = time.perf_counter() - start
    start = time.perf_counter()
    peer.load(bench.peer.conn, stage)
    peer_s = time.perf_counter() - start
    bench.loaded.append(stage)
    check_same(bench, stage)
    bench.log(
        f"loaded {count:,} entities to reach {stage.hi:,}: store {count / store_s:,.0f}/s "
        f"(bulk_put, batches of {plan.load_batch}), peer {count / peer_s:,.0f}/s (server-side)"
    )
    return {
        "size": stage.hi,
        "entities": count,
        "store_seconds": store_s,
        "store_entities_per_s": count / store_s,
        "peer_seconds": peer_s,
        "peer_rows_per_s": count / peer_s,
    }


def forget_writes(bench: Bench) -> int:
    """Delete what the write legs and the live writers added (their users are numbered from
    ``WRITER_USERS_0``), from the store and from the peer, so that both hold exactly the data
    set again. Bookkeeping of the benchmark, by hand on the raw connections, not timed."""
    from schemaless_store.topology import shards
    from schemaless_store.values import index_values

    user_keys = [
        index_values.encode_key(u) for u in range(WRITER_USERS_0, WRITER_USERS_0 + WRITER_USERS)
    ]
    marks = ", ".join(["%s"] * len(user_keys))
    ids: list[bytes] = []
    for conn in bench.raw.index_conns.values():
        cursor = conn.cursor()
        cursor.execute(f"SELECT entity_id FROM index_user_id WHERE user_id IN ({marks})", user_keys)
        ids.extend(row[0] for row in cursor.fetchall())
    for alias in shards.shard_aliases():
        cursor = bench.raw.entity_conns[alias].cursor()
        cursor.execute("SHOW TABLES LIKE 'index\\_%%'")
        tables = [row[0] for row in cursor.fetchall()]
        mine = [i for i in ids if bench.raw.alias_for(i) == alias]
        for start in range(0, len(ids), DELETE_CHUNK):
            chunk = ids[start : start + DELETE_CHUNK]
            id_marks = ", ".join(["%s"] * len(chunk))
            for table in tables:  # index rows live on the shard of their value, not the entity's
                cursor.execute(f"DELETE FROM `{table}` WHERE entity_id IN ({id_marks})", chunk)
        for start in range(0, len(mine), DELETE_CHUNK):
            chunk = mine[start : start + DELETE_CHUNK]
            id_marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(f"DELETE FROM entities WHERE id IN ({id_marks})", chunk)
    cursor = bench.peer.conn.cursor()
    cursor.execute(f"DELETE FROM {peer.TABLE} WHERE user_id >= %s", (WRITER_USERS_0,))
    bench.peer.conn.commit()
    cursor.execute(f"SELECT COUNT(*) FROM {peer.TABLE}")
    counts = {"peer": cursor.fetchone()[0]}
    for alias, conn in bench.raw.entity_conns.items():
        cursor = conn.cursor()
        cursor.execute("SELECT COUNT(*) FROM entities")
        counts[alias] = cursor.fetchone()[0]
    if counts["peer"] != bench.size or sum(counts.values()) - counts["peer"] != bench.size:
        raise AssertionError(f"after removing the writes, {counts} do not hold {bench.size:,}")
    return len(ids)


def settle(bench: Bench, timeout: float = 30.0) -> float:
    """Wait (up to ``timeout`` s) until InnoDB has flushed most dirty pages on both servers, so
    that a latency measurement does not start in the wake of the previous leg's bulk writes."""
    if bench.plan.settle_s <= 0:
        return 0.0
    timeout = min(timeout, bench.plan.settle_s)
    start = time.perf_counter()
    conns = [bench.peer.conn, *bench.raw.entity_conns.values()]
    while time.perf_counter() - start < timeout:
        dirty = 0
        for conn in conns:
            cursor = conn.cursor()
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")
            dirty = max(dirty, int(cursor.fetchone()[1]))
        if dirty < 200:  # 200 pages of 16 KiB: nothing worth a stall
            break
        time.sleep(0.2)
    return time.perf_counter() - start
