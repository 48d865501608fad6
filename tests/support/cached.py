"""Processes that write and read through the entity cache at once
(``python -m tests.support.cached``).

The parent makes a :class:`Board` in shared memory: the ids of some entities (property ``n``
starts at 0) and one counter per entity.

- ``writer BOARD FIRST COUNT SECONDS``: for the ids ``FIRST .. FIRST+COUNT-1``, sets ``n`` to
  the next number with ``save()`` or ``bulk_put()`` and, *after the write returns*, posts that
  number on the board: an acknowledged write. It reads each entity back at once too (its own
  write must show);
- ``reader BOARD SECONDS``: reads a posted number, then the entity (``get`` or ``get_many``):
  its ``n`` must be at least the number posted before the read began.

Each prints its counts as JSON: reads, stale reads (with examples), the cache's hits.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import time
import uuid
from multiprocessing import resource_tracker, shared_memory
from typing import Any

from tests.support import child

_SLOT = struct.Struct("<qq")  # a counter, written twice: a torn read shows two values


class Board:
    """Ids and their last acknowledged numbers, shared by processes."""

    def __init__(self, memory: shared_memory.SharedMemory, owner: bool) -> None:
        self.memory = memory
        self.owner = owner
        (count,) = struct.unpack_from("<I", memory.buf, 0)
        self.ids = [
            uuid.UUID(bytes=bytes(memory.buf[4 + 16 * i : 20 + 16 * i])) for i in range(count)
        ]
        self._slots = 4 + 16 * count

    @classmethod
    def create(cls, ids: list[uuid.UUID]) -> Board:
        size = 4 + len(ids) * (16 + _SLOT.size)
        memory = shared_memory.SharedMemory(create=True, size=size)
        struct.pack_into("<I", memory.buf, 0, len(ids))
        for number, entity_id in enumerate(ids):
            memory.buf[4 + 16 * number : 20 + 16 * number] = entity_id.bytes
        board = cls(memory, owner=True)
        for number in range(len(ids)):
            board.post(number, 0)
        return board

    @classmethod
    def attach(cls, name: str) -> Board:
        memory = shared_memory.SharedMemory(name=name)
        # The parent owns it: this process must not unlink it when it exits.
        resource_tracker.unregister(memory._name, "shared_memory")  # type: ignore[attr-defined]
        return cls(memory, owner=False)

    @property
    def name(self) -> str:
        return self.memory.name

    def post(self, number: int, value: int) -> None:
        _SLOT.pack_into(self.memory.buf, self._slots + _SLOT.size * number, value, value)

    def posted(self, number: int) -> int:
        while True:
            first, second = _SLOT.unpack_from(self.memory.buf, self._slots + _SLOT.size * number)
            if first == second:
                return first

    def close(self) -> None:
        self.memory.close()
        if self.owner:
            self.memory.unlink()


def run_with_cleaner(
    board: Board, spawn: list[tuple[str, ...]], env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Run this module's processes (``(mode, *args)`` each) on ``board`` beside one cleaner
    pass; their reports, in the order given. The board is closed afterwards."""
    try:
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.cached", mode, board.name, *args],
                cwd=child.ROOT,
                env=child.child_env() if env is None else env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for mode, *args in spawn
        ]
        cleaner = child.spawn("manage", "runcleaner", "--once", stdout=subprocess.DEVNULL)
        results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
        cleaner.wait(timeout=120)
    finally:
        board.close()
    return results


def _writer(board: Board, first: int, count: int, seconds: float) -> dict[str, Any]:
    from schemaless_store.models import Entity

    rng = random.Random(first)
    mine = list(range(first, first + count))
    numbers = {i: 0 for i in mine}
    writes = own_stale = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        picked = rng.sample(mine, k=min(len(mine), rng.choice([1, 1, 3])))
        for i in picked:
            numbers[i] += 1
        items = [{"id": board.ids[i], "n": numbers[i], "tag": f"t{numbers[i] % 3}"} for i in picked]
        if len(items) == 1:
            entity = Entity.objects.get(id=board.ids[picked[0]])
            entity["n"] = items[0]["n"]
            entity["tag"] = items[0]["tag"]
            entity.save()
        else:
            Entity.objects.bulk_put(items)
        for i in picked:
            board.post(i, numbers[i])  # acknowledged
        writes += len(picked)
        if Entity.objects.get(id=board.ids[picked[0]])["n"] < numbers[picked[0]]:
            own_stale += 1
    return {"writes": writes, "own_stale": own_stale}


def _reader(board: Board, seconds: float) -> dict[str, Any]:
    from schemaless_store.cache import entity_cache
    from schemaless_store.models import Entity

    rng = random.Random(os.getpid())
    reads = 0
    stale: list[tuple[str, int, int]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        picked = rng.sample(range(len(board.ids)), k=rng.choice([1, 1, 5]))
        before = {i: board.posted(i) for i in picked}
        if len(picked) == 1:
            found = {board.ids[picked[0]]: Entity.objects.get(id=board.ids[picked[0]])}
        else:
            found = Entity.objects.get_many([board.ids[i] for i in picked])
        for i in picked:
            reads += 1
            got = found[board.ids[i]]["n"]
            if got < before[i]:
                stale.append((str(board.ids[i]), got, before[i]))
    return {
        "reads": reads,
        "stale": len(stale),
        "examples": stale[:5],
        "hits": entity_cache.stats.hits,
        "near_hits": entity_cache.stats.near_hits,
    }


if __name__ == "__main__":
    child._setup()
    if os.environ.get("SCHEMALESS_TEST_NO_INVALIDATION"):  # the test's negative control
        from schemaless_store.cache import entity_cache

        entity_cache.invalidate = lambda keys: None  # type: ignore[assignment]
    mode, args = sys.argv[1], sys.argv[2:]
    shared = Board.attach(args[0])
    if mode == "writer":
        result = _writer(shared, int(args[1]), int(args[2]), float(args[3]))
    elif mode == "reader":
        result = _reader(shared, float(args[1]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    shared.close()
    print(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)
