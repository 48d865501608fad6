"""A second process with the near cache on (``python -m tests.support.near_child``): it answers
one JSON request per line on stdin with one JSON line, so that a test can drive it step by
step while the parent writes. The entity cache and its near cache come from the parent's
settings, as for every child (tests/support/child.py).

Requests: ``{"op": "read", "id": HEX}`` reads the entity with ``get``; ``read_near`` reads it
until a read is served from the near cache; ``{"op": "wait_gone",
"id": HEX}`` waits until the near cache no longer holds the id (a push dropped it), then reads;
``{"op": "wait_reconnect", "after": N}`` waits for a tracking connection after the N-th, then
reads. Every answer carries the entity's ``n`` (or None) and the caches' counters.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

from tests.support import child


def _answer(entity_id: str | None, waited: float = 0.0) -> dict[str, Any]:
    from schemaless_store.cache import entity_cache, near_cache
    from schemaless_store.models import Entity

    n = None
    if entity_id is not None:
        n = Entity.objects.get(id=uuid.UUID(entity_id))["n"]
    near = near_cache.existing()
    return {
        "n": n,
        "waited": waited,
        "hits": entity_cache.stats.hits,
        "near_hits": entity_cache.stats.near_hits,
        "pushed": near.stats.pushed if near is not None else 0,
        "flushes": near.stats.flushes if near is not None else 0,
        "connections": near.stats.connections if near is not None else 0,
        "client_id": near.client_id if near is not None else None,
        "held": len(near) if near is not None else 0,
    }


def _wait(ready: Any, timeout: float = 10.0) -> float:
    began = time.monotonic()
    while not ready():
        if time.monotonic() - began > timeout:
            raise TimeoutError("gave up waiting")
        time.sleep(0.001)
    return time.monotonic() - began


def _settle(near: Any, since: float) -> None:
    _wait(lambda: near.heard() > since)


def _handle(request: dict[str, Any]) -> dict[str, Any]:
    from schemaless_store.cache import entity_cache, near_cache

    op, entity_id = request["op"], request.get("id")
    if op == "read":
        return _answer(entity_id)
    if op == "read_near":  # until a read is served from the near cache, and the copy stays
        key = uuid.UUID(entity_id).bytes.hex()
        deadline = time.monotonic() + 10  # a loaded machine: the tracking thread connects late
        while time.monotonic() < deadline:
            time.sleep(0.01)
            before = entity_cache.stats.near_hits
            answer = _answer(entity_id)
            near = near_cache.existing()
            if near is None or entity_cache.stats.near_hits == before:
                continue
            # A push queued before now (its own new token's) is applied once a later PING is.
            _settle(near, time.monotonic())
            if near.holds(key):
                return answer
        return {"error": "no read was served from the near cache"}
    near = near_cache.existing()
    assert near is not None, "no near cache yet: read first"
    if op == "wait_gone":
        key = uuid.UUID(entity_id).bytes.hex()
        return _answer(entity_id, _wait(lambda: not near.holds(key)))
    if op == "wait_reconnect":
        after = request["after"]
        return _answer(entity_id, _wait(lambda: near.stats.connections > after and near.usable()))
    return {"error": f"unknown op {op!r}"}


def serve() -> None:
    for line in sys.stdin:
        try:
            answer = _handle(json.loads(line))
        except Exception as exc:  # the parent's assertion shows it
            answer = {"error": repr(exc)}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    child._setup()
    serve()
    os._exit(0)
