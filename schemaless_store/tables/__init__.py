"""The store's tables, each row routed to the shard that owns it (the layer above the topology).

- :mod:`.entities`: the ``entities`` table, and ``cell_head`` through the same
  :class:`~schemaless_store.config.indexes.Source` shape (lock, write, read by id, the
  cleaner's walks);
- :mod:`.index_rows`: index tables (idempotent inserts, unique claims, deletes, walks);
- :mod:`.scans`: the read path's index scans, continued by keyset (:mod:`..sql.keyset`);
- :mod:`.cells`: the ``cell`` and ``cell_head`` tables (versions, history, the change feed);
- :mod:`.ddl`: creating and dropping index tables; :mod:`.counts`: counting rows;
- :mod:`.lifecycle`: an index's state (building, ready, retired) and its tables on every shard;
- :mod:`.clustering`: the ``entities`` table's layout, changed online;
- :mod:`.buckets`: each shard's bucket table and its generation (the fence's authority);
- :mod:`.receipts`: the write receipts that decide a retry;
- :mod:`.moved_rows`: what a bucket move copies, replays, verifies and deletes, table by table;
- :mod:`.move_log`: a move's change-capture triggers on a source and their log;
- :mod:`.map_runs`: a ``mapentities`` run's checkpoints, saved marks and failures.

Statements on a session the caller holds (no routing) are :mod:`..sql`'s. The write path, the
read path, the cleaner, the admin and the commands ask these two layers for rows; none of them
spells a statement itself (Django's ORM on the ``default`` database's metadata tables,
:mod:`..config.metadata`, aside; ``tests/house/test_layers.py`` holds every other module to it).
"""
