"""Which server holds an id, and how a connection reaches it (docs/architecture.md#topology).

Its modules sit in the layers of tests/house/test_layers.py by what they import (this
``__init__`` imports nothing):

- Pure: :mod:`.entity_ids` (the 16-byte ids and their time-ordered layout),
  :mod:`.bucket_hash` (id → bucket, stable across processes).
- Config: :mod:`.server_support` (MariaDB 10.11+ only, checked as each connection opens).
- Topology: :mod:`.bucket_map` (bucket → shard, the stored map and moves), :mod:`.placement`
  (ids placed beside a property's value), :mod:`.shards` (a shard's connection, reads and
  snapshots), :mod:`.servers` (probes, Galera facts), :mod:`.retries` (deadlock and
  lost-connection retries), :mod:`.replicas` (reads from replicas, never older than one's own
  writes), :mod:`.clustering` (the entities table's layout), :mod:`.write_lock` (the
  store-wide write lock of SQLite shards), :mod:`.server_lock` (the lock one background worker
  holds on a server: a cleaner per (index, shard), one mover, a map walk per (run, shard)).
- Guards: :mod:`.fence` (what a shard takes: a bucket being moved refuses writes on its source).
- Django face: :mod:`.router` (Django's database router).

The statements on one session (:mod:`..tables.sessions` and its siblings) sit below the
topology and the tables that route rows above it, so ``tables`` and ``topology`` import each
other as packages while no module imports a higher layer.
"""
