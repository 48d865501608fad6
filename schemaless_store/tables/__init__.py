"""Every statement the store runs on its own tables, in one layer.

- :mod:`.values`: database values as the store's values (bytes, the ``updated`` datetime);
- :mod:`.entities`: the ``entities`` table, and ``cell_head`` through the same
  :class:`~schemaless_store.indexes.Source` shape (lock, write, read by id, the cleaner's walks);
- :mod:`.index_rows`: index tables (idempotent inserts, unique claims, deletes, walks);
- :mod:`.scans`: the read path's index scans, continued by keyset (:mod:`.keyset`);
- :mod:`.cells`: the ``cell`` and ``cell_head`` tables (versions, history, the change feed);
- :mod:`.ddl`: creating and dropping index tables; :mod:`.counts`: counting rows;
- :mod:`.literals`: multi-row ``INSERT`` statements rendered from typed values (MySQL);
- :mod:`.buckets`: each shard's bucket table and its generation (the fence's authority);
- :mod:`.sessions`: a server session's round trip, variables and settings (Galera's, a
  consistent snapshot), and the process list and ``KILL`` (a move's fence);
- :mod:`.moved_rows`: what a bucket move copies, replays, verifies and deletes, table by table;
- :mod:`.move_log`: a move's change-capture triggers on a source and their log;
- :mod:`.map_runs`: a ``mapentities`` run's checkpoints, saved marks and failures;
- :mod:`.server_locks`: the statements of ``topology.server_lock``, a worker's lock on a server
  (``GET_LOCK``, or the Galera lease row);
- :mod:`.gtids`: a server's GTID positions (read-your-writes on replicas).

The write path, the read path, the cleaner, the admin and the commands ask these modules for
rows; none of them spells a statement itself (Django's ORM on the ``default`` database's
metadata tables, :mod:`..metadata`, aside; ``tests/house/test_layers.py`` holds every other module
to it).
"""
