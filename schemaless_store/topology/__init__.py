"""Which server holds an id, and how a connection reaches it
(docs/architecture.md#the-modules-layer-by-layer).

- :mod:`.bucket_map`: bucket → shard, the stored map and moves;
- :mod:`.placement`: ids placed beside a property's value;
- :mod:`.shards`: a shard's connection, reads and snapshots;
- :mod:`.servers`: probes, Galera facts;
- :mod:`.retries`: deadlock and lost-connection retries;
- :mod:`.replicas`: reads from replicas, never older than one's own writes;
- :mod:`.write_lock`: the store-wide write lock of SQLite shards.

The layer above the session statements (:mod:`..sql`) and below the tables (:mod:`..tables`);
ids and their buckets are values (:mod:`..values.entity_ids`, :mod:`..values.bucket_hash`).
"""
