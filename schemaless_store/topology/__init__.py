"""Which server holds an id, and how a connection reaches it (docs/architecture.md#topology).

- Ids and buckets: :mod:`.entity_ids` (the 16-byte ids and their time-ordered layout),
  :mod:`.bucket_hash` (id → bucket, stable across processes), :mod:`.placement` (ids placed
  beside a property's value), :mod:`.bucket_map` (bucket → shard, the stored map and moves).
- Connections: :mod:`.shards` (a shard's connection, reads and snapshots), :mod:`.router`
  (Django's database router), :mod:`.server_support` (MariaDB 10.11+ only, at every connection),
  :mod:`.retries` (deadlock and lost-connection retries), :mod:`.servers` (probes, Galera facts),
  :mod:`.replicas` (reads from replicas, never older than one's own writes),
  :mod:`.clustering` (the entities table's layout).
- Writers' guards: :mod:`.write_lock` (the process's shared lock on the bucket map),
  :mod:`.fence` (a bucket being moved refuses writes on its source).
"""
