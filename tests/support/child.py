"""Child processes for tests that kill or signal a process:
``python -m tests.support.child <mode>``.

The parent passes its ``DATABASES`` (test NAMEs included) in ``SCHEMALESS_TEST_DATABASES``, so a
child works on the parent's test databases: the same SQLite files, or the same throwaway MariaDB
servers (tests/settings.py). ``SCHEMALESS_TEST_EXTRA_INDEXES`` names indexes from
:data:`EXTRA_INDEXES` that the test declared at runtime; the child declares them too.

Modes:

- ``manage <command> [args...]``: a management command, as ``manage.py`` would run it.
- ``killedmover <point> movebuckets [args...]``: ``movebuckets`` that SIGKILLs itself at one of
  :data:`MOVER_KILL_POINTS` (before a phase's work, or inside the triggers' install or the
  deletion of the old copies).
- ``mixedloop``: reads one JSON request (seed, shared ids, seconds) on stdin, runs
  :func:`mixed_loop` and prints its counts (with this process's write retries) as JSON.
- ``counter <id> <times>``: :func:`add_to_counter` ``times`` times; prints how many
  conflicts it retried, as JSON.
- ``crashwriter``: a fork server for fault injection (:mod:`tests.support.crash_writer`). It
  reads one JSON request per line on stdin; for each it forks a writer process that counts the
  SQL statements and commits it sends (by patching Django's ``CursorWrapper`` and ``commit()``)
  and SIGKILLs itself just before number ``kill_at``. It answers with one JSON line: how the
  writer ended and how many statements it sent. Forking from a process that has Django loaded
  (and no open connection) makes each writer cheap to start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import connections

from schemaless_store.config.indexes import Index
from tests.support.crash_writer import mixed_props

ROOT = Path(__file__).resolve().parents[2]

EXTRA_INDEXES = {
    index.name: index
    for index in [
        Index(
            table="index_cleaner_published",
            properties=["published"],
            shard_on="published",
            types={"published": "int"},
        ),
        Index(table="index_cleaner_color", properties=["color"], shard_on="color"),
        Index(table="index_cell_email", properties=["email"], shard_on="email", column="users"),
        Index(
            table="index_cell_school_year",
            properties=["school", "year"],
            shard_on="school",
            types={"year": "int"},
            column="users",
        ),
    ]
}


# --- parent side ---------------------------------------------------------------------------


@contextlib.contextmanager
def declared(which: str | Index) -> Iterator[Index]:
    """Declare an index (``EXTRA_INDEXES[name]``, or one given) as a deploy would (tables on
    every shard, then a state: ``ready`` on an empty store, else ``building``); undeclare it
    and drop its tables after."""
    from schemaless_store.config.indexes import registry
    from schemaless_store.tables import lifecycle
    from schemaless_store.tables.ddl import create_tables, drop_table
    from schemaless_store.topology import shards

    index = EXTRA_INDEXES[which] if isinstance(which, str) else which
    name = index.name
    registry.register(index)
    try:
        for alias in shards.shard_aliases():
            create_tables(alias, [index])
        lifecycle.declare(index)
        yield index
    finally:
        registry.unregister(name)
        for alias in shards.shard_aliases():
            drop_table(alias, name)
        lifecycle.forget_states()


def child_env(extra_indexes: list[str] | tuple[str, ...] = ()) -> dict[str, str]:
    from django.conf import settings

    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["SCHEMALESS_TEST_DATABASES"] = json.dumps(settings.DATABASES, default=str)
    env["SCHEMALESS_TEST_EXTRA_INDEXES"] = json.dumps(list(extra_indexes))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    cache = settings.SCHEMALESS.get("CACHE")
    if cache:  # the entity cache the test turned on, for the child too
        env["SCHEMALESS_TEST_CACHE"] = json.dumps(settings.CACHES[cache])
    else:
        env.pop("SCHEMALESS_TEST_CACHE", None)
    near = settings.SCHEMALESS.get("NEAR_CACHE")
    if cache and near is not None:  # and its near cache
        env["SCHEMALESS_TEST_NEAR_CACHE"] = json.dumps(near)
    else:
        env.pop("SCHEMALESS_TEST_NEAR_CACHE", None)
    return env


def spawn(mode: str, *args: str, extra_indexes: tuple[str, ...] = (), **popen: Any) -> Any:
    """Start ``python -m tests.support.child <mode> <args>``; returns the ``Popen``."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.child", mode, *args],
        cwd=ROOT,
        env=child_env(extra_indexes),
        **popen,
    )


def manage(*args: str, extra_indexes: tuple[str, ...] = (), timeout: float = 120) -> Any:
    """Run a management command in a child process; returns the ``CompletedProcess``."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.child", "manage", *args],
        cwd=ROOT,
        env=child_env(extra_indexes),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    reconnect()
    return done


def reconnect() -> None:
    """After a child that may have moved buckets: a move's fence ends every other connection
    of the store's user on the sources (docs/design.md#the-fence), this process's too. The
    store's own paths open fresh ones by themselves; this thread's Django connections, which
    the tests also read through directly, are closed so that the next use reconnects."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close()


class CrashWriter:
    """The parent's handle on a ``crashwriter`` fork server."""

    def __init__(self, extra_indexes: tuple[str, ...] = ()) -> None:
        self.process = spawn(
            "crashwriter",
            extra_indexes=extra_indexes,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer: dict[str, Any] = {}
        while "ended" not in answer:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"crashwriter exited ({self.process.wait()})")
            answer.update(json.loads(line))
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# --- child side ----------------------------------------------------------------------------


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from schemaless_store.config.indexes import registry

    for name in json.loads(os.environ.get("SCHEMALESS_TEST_EXTRA_INDEXES", "[]")):
        registry.register(EXTRA_INDEXES[name])


def mixed_loop(seed: int, ids: list[str], seconds: float) -> dict[str, Any]:
    """Seeded mixed writes on the shared ``ids`` for ``seconds``, changing indexed properties:
    creates, updates, deletes and ``bulk_put`` calls. Concurrent writers race on the same ids;
    :class:`EntityExists` (a create that lost the race) is a normal answer, anything else raised
    is counted as an error. Returns counts, the first errors, and this process's retries."""
    import random
    import time
    import uuid

    from django.db import connections

    from schemaless_store.exceptions import EntityExists
    from schemaless_store.models import Entity
    from schemaless_store.topology import shards

    rng = random.Random(seed)
    counts: dict[str, int] = {}
    errors: list[str] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            op = rng.choice(["create", "update", "delete", "bulk_put"])
            target = uuid.UUID(rng.choice(ids))
            try:
                if op == "create":
                    Entity.objects.create(id=target, **mixed_props(rng))
                elif op == "bulk_put":
                    chosen = rng.sample(ids, 3)
                    Entity.objects.bulk_put(
                        [{"id": uuid.UUID(i), **mixed_props(rng)} for i in chosen]
                    )
                else:
                    entity = Entity.objects.get_many([target]).get(target)
                    if entity is None:
                        op = "missing"
                    elif op == "delete":
                        entity.delete()
                    else:
                        for name in list(entity.body_properties()):
                            del entity[name]
                        for name, value in mixed_props(rng).items():
                            entity[name] = value
                        entity.save()
            except EntityExists:
                op = "exists"
            except Exception as exc:
                errors.append(f"{op}: {exc!r}")
                op = "error"
            counts[op] = counts.get(op, 0) + 1
    finally:
        connections.close_all()
        shards.close_index_connections()
    return {"counts": counts, "errors": errors[:10], "error_count": len(errors)}


def _mixed_loop() -> None:
    from schemaless_store.topology import retries

    request = json.loads(sys.stdin.readline())
    before = retries.retries_made()
    answer = mixed_loop(request["seed"], request["ids"], request["seconds"])
    answer["retries"] = retries.retries_made() - before
    print(json.dumps(answer), flush=True)


def add_to_counter(entity_id: str, times: int) -> int:
    """``Entity.objects.modify`` adding 1 to ``n``, ``times`` times; the conflicts retried."""
    import uuid

    from schemaless_store.models import Entity

    retried = 0

    def add(entity: Any) -> None:
        nonlocal retried
        retried += 1
        entity["n"] += 1

    for _ in range(times):
        Entity.objects.modify(uuid.UUID(entity_id), add, attempts=COUNTER_ATTEMPTS)
        retried -= 1
    return retried


# Ten writers on one entity: an attempt fails when any of the others saved between its read and
# its lock; more attempts than the default 10, so that the test counts lost updates, not luck.
COUNTER_ATTEMPTS = 200


def _claimer() -> None:
    import uuid

    from django.db import connections

    from schemaless_store.exceptions import UniqueViolation
    from schemaless_store.models import Entity

    for line in sys.stdin:
        request = json.loads(line)
        try:
            Entity.objects.create(id=uuid.UUID(request["id"]), username=request["username"])
            answer = "won"
        except UniqueViolation:
            answer = "lost"
        except Exception as exc:
            answer = f"error {exc!r}"
        connections.close_all()
        print(json.dumps({"result": answer}), flush=True)


# Where ``killedmover`` SIGKILLs the mover: before each phase's work (just after its record
# says the phase began), and inside the two steps that are not phases of their own.
MOVER_KILL_POINTS = {
    "installing": "copying",  # the change-capture triggers of the first source installed
    "copying": "copying",  # prepared (target marked, triggers on, map marked); nothing copied
    "catching up": "catching up",
    "fenced": "fenced",
    "flipped": "flipped",
    "cleaning": "cleaning",
    "deleting": "cleaning",  # the first source's copies deleted, not yet the others'
}


def _killed_mover(point: str, args: list[str]) -> None:
    """``movebuckets`` that SIGKILLs itself at ``point`` (:data:`MOVER_KILL_POINTS`)."""
    from django.core.management import execute_from_command_line

    from schemaless_store.moves import mover

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "installing":
        install = mover.capture.install

        def installing(*a: Any, **k: Any) -> None:
            install(*a, **k)
            die()

        mover.capture.install = installing  # type: ignore[assignment]
    elif point == "deleting":
        purge = mover.Mover._purge

        def deleting(self: Any, alias: str, what: str) -> None:
            purge(self, alias, what)
            if alias != self.move.target:
                die()

        mover.Mover._purge = deleting  # type: ignore[method-assign]
    elif point in MOVER_KILL_POINTS:
        save = mover.Mover._save

        def saving(self: Any, **changes: Any) -> None:
            phase, prepared = self.move.phase, bool(self.move.checkpoints.get("prepared"))
            save(self, **changes)
            if point == "copying":
                if not prepared and self.move.checkpoints.get("prepared"):
                    die()
            elif self.move.phase == point and phase != point:
                die()

        mover.Mover._save = saving  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown kill point {point!r}")
    execute_from_command_line(["manage.py", *args])


def main(argv: list[str]) -> None:
    _setup()
    mode, args = argv[0], argv[1:]
    if mode == "manage":
        from django.core.management import execute_from_command_line

        execute_from_command_line(["manage.py", *args])
    elif mode == "killedmover":
        _killed_mover(args[0], args[1:])
    elif mode == "crashwriter":
        from tests.support import crash_writer

        crash_writer.serve()
    elif mode == "claimer":
        _claimer()
    elif mode == "mixedloop":
        _mixed_loop()
    elif mode == "counter":
        from django.db import connections

        retried = add_to_counter(args[0], int(args[1]))
        connections.close_all()
        print(json.dumps({"retried": retried}), flush=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
