"""A store that grows: three shards, the third with no buckets at first, on a THIRD server.

``GrownStore`` makes fresh databases (MariaDB: metadata and shard_0 on the suite's first server,
shard_1 on its second, shard_2 on a third throwaway server; SQLite: four files), migrates them,
and runs child processes on them (``python -m tests.support.grown <mode>``):

- ``writer SEED PREFIX SECONDS ACKS``: creates, updates that change indexed values, deletes,
  ``bulk_put`` calls, unique claims and cell puts on its own ids (their first bytes are
  ``PREFIX``), for ``SECONDS``; each write is logged to ``ACKS`` as begun, then acknowledged.
- ``rival IDS SECONDS TAG``: saves the entities ``IDS`` over and over
  (tests/replicas/test_galera.py);
- ``census``: prints, as JSON, every entity id on every shard (raw reads), each entity's
  properties, every cell version, and whether the index tables are exact (I3) and every query
  an entity implies finds it (I1, I2).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support import child

LAYOUT = {"shard_0": "0-2047", "shard_1": "2048-4095", "shard_2": []}


class GrownStore:
    """Fresh databases for the growing store, migrated; :meth:`close` drops them."""

    def __init__(
        self, workdir: Path, third_server: Any = None, layout: dict[str, Any] | None = None
    ) -> None:
        from django.conf import settings

        from schemaless_store.config.dburls import databases_from_urls, embedded_urls
        from tests.support.restored import _sql

        self.layout = LAYOUT if layout is None else layout
        self.names: list[tuple[Any, str]] = []
        if settings.BACKEND == "mariadb":
            first, second = settings.MARIADB_SERVERS
            tag = uuid.uuid4().hex[:8]
            homes = [first, first, second, third_server]
            labels = ["meta", "shard0", "shard1", "shard2"]
            self.names = [
                (home, f"grow_{tag}_{label}") for home, label in zip(homes, labels, strict=True)
            ]
            for server, name in self.names:
                _sql(server, f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            timeouts = {"connect_timeout": "5", "read_timeout": "60", "write_timeout": "60"}
            urls = [server.url(name, **timeouts) for server, name in self.names]
            self.databases = databases_from_urls(urls[0], urls[1:])
        else:
            self.databases = databases_from_urls(*embedded_urls(workdir, shards=3))
        self.manage("migrateall", "--verbosity", "0")

    def env(self) -> dict[str, str]:
        env = child.child_env()
        env["SCHEMALESS_TEST_DATABASES"] = json.dumps(self.databases, default=str)
        env["SCHEMALESS_TEST_SHARDS"] = json.dumps(self.layout)
        env["SCHEMALESS_TEST_MAP_MAX_AGE"] = "0.1"  # a move's read bound: 0.7 s
        return env

    def spawn(self, *args: str, **popen: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", *args], cwd=child.ROOT, env=self.env(), text=True, **popen
        )

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", *args],
            cwd=child.ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def manage(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = self.run("tests.support.child", "manage", *args)
        if check:
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return done

    def census(self) -> dict[str, Any]:
        done = self.run("tests.support.grown", "census")
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    def close(self) -> None:
        from tests.support.restored import _sql

        for server, name in self.names:
            _sql(server, f"DROP DATABASE IF EXISTS {name}")


def checked_census(store: GrownStore, acks: list[Path]) -> dict[str, Any]:
    """One cleaner pass, then the census, checked: index tables exact and every query right
    (I1-I4), every id on its owner only, every acknowledged write in its last acknowledged
    state (or a begun one that was never acknowledged), nothing else."""
    from schemaless_store.values.jsonview import properties_to_json

    store.manage("runcleaner", "--once")
    census = store.census()
    assert census["inexact"] is None, census["inexact"]
    assert census["queries"] is None, census["queries"]
    for key, aliases in census["placed"].items():
        assert aliases == [census["owners"][key]], (key, aliases)
    expected = expected_states(acks)
    assert expected, "the writers wrote nothing"
    for key, options in expected.items():
        found = census["entities"].get(key)
        wanted = [None if o is None else properties_to_json(o) for o in options]
        assert found in wanted, (key, found, options)
    unexpected = set(census["entities"]) - set(expected)
    assert not unexpected, sorted(unexpected)[:5]
    return census


def expected_states(ack_files: list[Path]) -> dict[str, list[Any]]:
    """``{id hex: [acceptable final states]}`` from the writers' logs: the last acknowledged
    state, or, if a write began after it and was never acknowledged (its writer was killed),
    that one too. A state is the properties, or None for deleted."""
    found: dict[str, list[Any]] = {}
    for path in ack_files:
        last_ack: dict[str, Any] = {}
        pending: dict[str, Any] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            for kind, states in record.items():
                for key, state in states.items():
                    if kind == "begin":
                        pending[key] = state
                    else:
                        last_ack[key] = state
                        pending.pop(key, None)
        for key in set(last_ack) | set(pending):
            options = [last_ack[key]] if key in last_ack else [None]
            if key in pending:
                options.append(pending[key])
            found[key] = options
    return found


# --- child side ----------------------------------------------------------------------------


def _writer(seed: int, prefix: str, seconds: float, acks: str) -> None:
    from schemaless_store.exceptions import ShardUnavailable, UniqueViolation
    from schemaless_store.models import Cell, Entity
    from tests.support.child import mixed_props

    rng = random.Random(seed)
    ids: list[str] = []

    def new_id() -> str:
        return prefix + uuid.UUID(int=rng.getrandbits(128)).hex[len(prefix) :]

    deadline = time.monotonic() + seconds
    with open(acks, "a", encoding="utf-8") as log:

        def record(kind: str, states: dict[str, Any]) -> None:
            log.write(json.dumps({kind: states}) + "\n")
            log.flush()  # in the page cache: survives this process's SIGKILL

        def step(op: str) -> None:
            if op in ("update", "delete", "cell") and not ids:
                op = "create"
            if op == "create" or op == "claim":
                key = new_id()
                props = mixed_props(rng)
                if op == "claim":
                    props["username"] = f"{prefix}-{rng.randrange(20)}"
                record("begin", {key: props})
                try:
                    Entity.objects.create(id=uuid.UUID(key), **props)
                except UniqueViolation:
                    record("ack", {key: None})  # refused: nothing was written
                    return
                ids.append(key)
                record("ack", {key: props})
            elif op == "bulk_put":
                items = {new_id(): mixed_props(rng)}
                items[rng.choice(ids or [new_id()])] = mixed_props(rng)
                record("begin", items)
                Entity.objects.bulk_put([{"id": uuid.UUID(i), **p} for i, p in items.items()])
                ids.extend(i for i in items if i not in ids)
                record("ack", items)
            elif op == "cell":
                key = rng.choice(ids)
                Cell.objects.put(uuid.UUID(key), "note", {"at": time.time()})
            else:
                key = rng.choice(ids)
                entity = Entity.objects.get_many([uuid.UUID(key)]).get(uuid.UUID(key))
                if entity is None:
                    return
                if op == "delete":
                    record("begin", {key: None})
                    entity.delete()
                    record("ack", {key: None})
                    return
                props = mixed_props(rng)
                if rng.random() < 0.3:
                    props["username"] = f"{prefix}-{rng.randrange(20)}"
                for name in list(entity.body_properties()):
                    del entity[name]
                for name, value in props.items():
                    entity[name] = value
                record("begin", {key: props})
                try:
                    entity.save()
                except UniqueViolation:
                    record("ack", {key: _stored(key)})
                    return
                record("ack", {key: props})

        while time.monotonic() < deadline:
            time.sleep(0.04)  # a steady trickle: the census checks every entity afterwards
            try:
                step(
                    rng.choice(
                        ["create", "create", "update", "delete", "bulk_put", "claim", "cell"]
                    )
                )
            except ShardUnavailable as exc:
                # A server went away under this write (tests/replicas/test_galera.py kills a
                # node): the write stays begun, never acknowledged, as an application would see it.
                print(f"writer {prefix}: a write failed: {exc}", file=sys.stderr, flush=True)
                time.sleep(0.2)


def _stored(key: str) -> Any:
    from schemaless_store.models import Entity

    found = Entity.objects.get_many([uuid.UUID(key)]).get(uuid.UUID(key))
    return None if found is None else found.body_properties()


def _census() -> None:
    from django.db import connections

    from schemaless_store.models import Entity
    from schemaless_store.topology import bucket_map, shards
    from schemaless_store.values.jsonview import properties_to_json
    from tests.support.invariants import check_no_false_negatives, check_no_false_positives, inexact

    placed: dict[str, list[str]] = {}
    for alias in shards.shard_aliases():
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT id FROM entities")
            for (key,) in cursor.fetchall():
                placed.setdefault(bytes(key).hex(), []).append(alias)
    entities = {e.id.hex: properties_to_json(e.body_properties()) for e in Entity.objects.all()}
    owners = {key: bucket_map.alias_for(bytes.fromhex(key)) for key in placed}
    try:
        check_no_false_positives(check_no_false_negatives())
        queries = None
    except AssertionError as exc:
        queries = str(exc)[:2000]
    print(
        json.dumps(
            {
                "placed": placed,
                "owners": owners,
                "entities": entities,
                "inexact": inexact(),
                "queries": queries,
            }
        )
    )


def _rival(ids: str, seconds: float, tag: str) -> None:
    """Save the entities ``ids`` (comma-separated hex) over and over for ``seconds``; print how
    many saves were made, and exit 1 after any error (tests/replicas/test_galera.py runs two of
    these through different nodes of a cluster: their conflicts meet at certification)."""
    from schemaless_store.models import Entity

    keys = [uuid.UUID(i) for i in ids.split(",")]
    rng = random.Random(tag)
    deadline = time.monotonic() + seconds
    saves = 0
    while time.monotonic() < deadline:
        Entity(id=rng.choice(keys), by=tag, n=saves, user_id=tag).save()
        saves += 1
    print(saves, flush=True)


def _step_five(role: str, key: str, sync: str) -> None:
    """Two writers of one entity through two nodes of a Galera cluster, in a fixed order
    (tests/replicas/test_galera_moves.py): ``holder`` changes its ``user_id`` from a to b and is
    held in its step 5 after the locked read that found the row of a stale, before deleting it;
    meanwhile
    ``writer``, through another node (whose locks do not see the holder's), puts a back."""
    from schemaless_store.models import Entity
    from schemaless_store.writes import index_writes

    entity_id, folder = uuid.UUID(key), Path(sync)

    def wait_for(name: str) -> None:
        deadline = time.monotonic() + 60
        while not (folder / name).exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"{role}: no {name}")
            time.sleep(0.01)

    if role == "seed":
        Entity(id=entity_id, user_id="a").save()
    elif role == "holder":
        delete = index_writes.delete

        def held(rows: Any) -> tuple[int, dict[str, list[Any]]]:
            rows = list(rows)
            if rows and not (folder / "read").exists():
                (folder / "read").touch()  # step 5 read the entity: the row of a is stale
                wait_for("written")
            return delete(rows)

        index_writes.delete = held  # type: ignore[assignment]
        Entity(id=entity_id, user_id="b").save()
    else:
        wait_for("read")
        Entity(id=entity_id, user_id="a").save()
        (folder / "written").touch()


def _node_killing_mover(pid: int, args: list[str]) -> None:
    """``movebuckets`` that SIGKILLs the Galera node ``pid`` (the one every process writes
    through) as its fence begins, then goes on (tests/replicas/test_galera_moves.py)."""
    from django.core.management import execute_from_command_line

    from schemaless_store.moves import mover

    fence = mover.Mover._fence

    def fencing(self: Any) -> None:
        if pid:
            os.kill(pid, signal.SIGKILL)
            print("killed the node at the fence", file=sys.stderr, flush=True)
        fence(self)

    mover.Mover._fence = fencing  # type: ignore[method-assign]
    execute_from_command_line(["manage.py", *args])


def _fence_every_node(buckets: str) -> None:
    """Open a session of the store's user on every node of ``shard_2`` (a Galera cluster),
    fence ``buckets`` there through the store's connection, and print which sessions are
    still alive (a fence must end them on every node: docs/design.md#the-fence); then give
    the buckets back."""
    import MySQLdb
    from django.db import connections

    from schemaless_store.guards import fence
    from schemaless_store.moves.plan import parse_buckets
    from schemaless_store.tables import buckets as bucket_table

    settings = connections["shard_2"].settings_dict
    numbers = parse_buckets(buckets)
    sessions = []
    for node in settings["OPTIONS"]["nodes"]:
        host, _, port = node.rpartition(":")
        sessions.append(
            (node, MySQLdb.connect(host=host, port=int(port), user="root", db=settings["NAME"]))
        )
    fence.withdraw("shard_2", numbers, bucket_table.FENCED)
    alive = []
    for node, session in sessions:
        try:
            session.query("SELECT 1")
            session.store_result()
            alive.append(node)
        except MySQLdb.OperationalError:
            pass
    fence.withdraw("shard_2", numbers, bucket_table.OWNED)
    print(json.dumps({"alive": alive, "nodes": [n for n, _s in sessions]}), flush=True)


def _lost_answer(key: str) -> None:
    """On the Galera shard: an update lands, another client deletes the entity, the answer
    is lost; print what the retry left (its receipt read says it landed: the entity stays
    deleted; the session keeps its ``wsrep_sync_wait``). Then a removal of receipts there
    (an ``atomic()`` block on Galera): how many, and the line before and after."""
    from django.db import connections

    from schemaless_store.models import Entity
    from schemaless_store.tables import receipts as receipt_table
    from schemaless_store.testing.faults import lost_commit_answers
    from schemaless_store.topology import servers

    entity = Entity.objects.create(id=uuid.UUID(key), n=1)
    shard = connections[entity._state.db]  # causal reads, as a deployment sets them
    shard.settings_dict.setdefault("OPTIONS", {})["init_command"] = "SET wsrep_sync_wait = 1"
    shard.close()
    entity["n"] = 2
    with lost_commit_answers(
        after_commit=lambda: Entity.objects.get(id=entity.id).delete()
    ) as faults:
        entity.save()
    left = Entity.objects.get_many([entity.id]).get(entity.id)
    with shard.cursor() as cursor:
        cursor.execute("SELECT @@SESSION.wsrep_sync_wait")
        (sync_wait,) = cursor.fetchone()
    time.sleep(2)  # the three receipts above, 2 s old: a retention of 0 removes them
    line = receipt_table.pruned("shard_2")
    removed = receipt_table.remove_expired("shard_2", 0, galera=servers.is_galera("shard_2"))
    print(
        json.dumps(
            {
                "lost": faults.lost,
                "galera": servers.is_galera(entity._state.db),
                "shard": entity._state.db,
                "left": None if left is None else left["n"],
                "sync_wait": int(sync_wait),
                "removed": removed,
                "line_rose": line is not None and receipt_table.pruned("shard_2") > line,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    child._setup()
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "writer":
        _writer(int(args[0]), args[1], float(args[2]), args[3])
    elif mode == "census":
        _census()
    elif mode == "rival":
        _rival(args[0], float(args[1]), args[2])
    elif mode == "stepfive":
        _step_five(args[0], args[1], args[2])
    elif mode == "fenceeverynode":
        _fence_every_node(args[0])
    elif mode == "lostanswer":
        _lost_answer(args[0])
    elif mode == "nodekillingmover":
        _node_killing_mover(int(args[0]), args[1:])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    os._exit(0)
