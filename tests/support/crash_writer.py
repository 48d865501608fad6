"""The child side of a ``crashwriter`` fork server (``python -m tests.support.child
crashwriter``; the parent's handle is :class:`tests.support.child.CrashWriter`): for each JSON
request read on stdin it forks a writer that counts the SQL statements and commits it sends and
SIGKILLs itself just before number ``kill_at``; op ``mixed`` runs a seeded mix of writes, each
logged as begun, then acknowledged."""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from typing import Any


def count_statements(kill_at: int | None) -> list[int]:
    """Patch Django's cursor wrapper: count statements, SIGKILL before number ``kill_at``.

    Commits count too (Django sends them through the connection, not a cursor): a kill between
    a transaction's last statement and its COMMIT is a state of its own.
    """
    from django.db.backends import utils
    from django.db.backends.base.base import BaseDatabaseWrapper

    count = [0]

    def counting(original: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            count[0] += 1
            if kill_at is not None and count[0] >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self, *args, **kwargs)

        return wrapper

    from django.db import connections

    if connections["default"].vendor == "mysql":
        # At the driver's Connection.query, which a cursor's execute ends in and which the
        # store's reads and commit batches call without a cursor: every query and every
        # COMMIT is a kill point.
        import MySQLdb.connections

        driver = MySQLdb.connections.Connection
        driver.query = counting(driver.query)  # type: ignore[method-assign]
        driver.commit = counting(driver.commit)  # type: ignore[method-assign]
        return count
    utils.CursorWrapper.execute = counting(utils.CursorWrapper.execute)
    utils.CursorWrapper.executemany = counting(utils.CursorWrapper.executemany)
    BaseDatabaseWrapper.commit = counting(BaseDatabaseWrapper.commit)
    return count


def generate_ids(ids: list[str]) -> None:
    """Make the store's own id generation hand out ``ids`` (so the parent knows them)."""
    import uuid

    from schemaless_store.values import entity_ids

    pending = [uuid.UUID(i).bytes for i in ids]
    entity_ids.new_id = lambda: pending.pop(0)


def write(request: dict[str, Any]) -> None:
    """One write, in a forked writer; prints the statement count if it was not killed."""
    import uuid

    from schemaless_store.models import Entity

    op = request["op"]
    entity = None
    if op in ("update", "delete"):
        entity = Entity.objects.get(id=uuid.UUID(request["id"]))
    count = count_statements(request.get("kill_at"))
    if op == "create":
        Entity.objects.create(id=uuid.UUID(request["id"]), **request["props"])
    elif op == "create_new":
        entity = Entity(**request["props"])
        print(json.dumps({"id": entity.id.hex}), flush=True)
        entity.save(force_insert=True)
    elif op == "update":
        assert entity is not None
        for name in list(entity.body_properties()):
            del entity[name]
        for name, value in request["props"].items():
            entity[name] = value
        entity.save()
    elif op == "delete":
        assert entity is not None
        entity.delete()
    elif op == "bulk_put":
        Entity.objects.bulk_put([{"id": uuid.UUID(i), **p} for i, p in request["items"]])
    elif op == "create_generated":  # the id is the store's own: a new entity's fast insert
        generate_ids([request["id"]])
        Entity.objects.create(**request["props"])
    elif op == "bulk_put_generated":  # new entities with generated ids: no locking read
        generate_ids([i for i, _p in request["items"]])
        Entity.objects.bulk_put([p for _i, p in request["items"]])
    elif op == "mixed":
        mixed(request)
    else:
        raise ValueError(f"unknown op {op!r}")
    print(json.dumps({"statements": count[0]}), flush=True)


MIXED_LINKS = ["https://a", "https://b", "https://c"]
MIXED_TAGS = ["red", "green", "blue"]


def mixed_props(rng: Any) -> dict[str, Any]:
    """Properties for the mixed writer: they touch the link, tags and user indexes."""
    props: dict[str, Any] = {"link": rng.choice(MIXED_LINKS), "n": rng.randint(0, 9)}
    if rng.random() < 0.7:
        props["tags"] = rng.sample(MIXED_TAGS, rng.randint(1, 2))
    if rng.random() < 0.5:
        props["user_id"] = rng.choice(["u1", "u2"])
    return props


def mixed(request: dict[str, Any]) -> None:
    """A seeded mix of writes on ``request["ids"]``; each is logged as begun, then acknowledged."""
    import random
    import uuid

    from schemaless_store.models import Entity

    rng = random.Random(request["seed"])
    ids = list(request["ids"])
    with open(request["acks"], "a", encoding="utf-8") as log:

        def record(kind: str, states: dict[str, Any]) -> None:
            log.write(json.dumps({kind: states}) + "\n")
            log.flush()  # in the kernel's page cache: survives this process's SIGKILL

        for _ in range(request["writes"]):
            op = rng.choice(["create", "update", "delete", "bulk_put"])
            if op == "create":
                new_id = uuid.UUID(int=rng.getrandbits(128)).hex
                props = mixed_props(rng)
                record("begin", {new_id: props})
                Entity.objects.create(id=uuid.UUID(new_id), **props)
                ids.append(new_id)
                record("ack", {new_id: props})
            elif op == "bulk_put":
                items = {uuid.UUID(int=rng.getrandbits(128)).hex: mixed_props(rng)}
                items[rng.choice(ids)] = mixed_props(rng)
                record("begin", items)
                Entity.objects.bulk_put([{"id": uuid.UUID(i), **p} for i, p in items.items()])
                ids.extend(i for i in items if i not in ids)
                record("ack", items)
            else:
                target = rng.choice(ids)
                entity = Entity.objects.get_many([uuid.UUID(target)]).get(uuid.UUID(target))
                if entity is None:
                    continue
                if op == "delete":
                    record("begin", {target: None})
                    entity.delete()
                    record("ack", {target: None})
                    continue
                props = mixed_props(rng)
                for name in list(entity.body_properties()):
                    del entity[name]
                for name, value in props.items():
                    entity[name] = value
                record("begin", {target: props})
                entity.save()
                record("ack", {target: props})


def serve() -> None:
    """Fork a writer per request read on stdin, and say how each ended."""
    from django.db import connections

    for line in sys.stdin:
        request = json.loads(line)
        # The writer must open its own connections (and SQLite write-lock file): a forked copy
        # of an open one would be shared with this process and outlive the kill.
        connections.close_all()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                write(request)
            except BaseException:
                traceback.print_exc()
                code = 3
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _pid, status = os.waitpid(pid, 0)
        ended = (
            f"signal {os.WTERMSIG(status)}"
            if os.WIFSIGNALED(status)
            else f"exit {os.WEXITSTATUS(status)}"
        )
        print(json.dumps({"ended": ended}), flush=True)
