"""Statements on a session the caller holds: no routing, no connection of their own.

- :mod:`.values`: database values as the store's values (bytes, the ``updated`` datetime);
- :mod:`.literals`: multi-row ``INSERT`` statements rendered from typed values;
- :mod:`.keyset`: keyset continuation of an ordered walk;
- :mod:`.sessions`: a server session's round trip, variables and settings (Galera's, a
  consistent snapshot), and the process list and ``KILL`` (a move's fence);
- :mod:`.server_locks`: the statements of :mod:`..guards.server_lock`, a worker's lock on a
  server (``GET_LOCK``, or the Galera lease row);
- :mod:`.gtids`: a server's GTID positions (read-your-writes on replicas);
- :mod:`.layout`: the ``entities`` table's layout as the server reports it;
- :mod:`.server_errors`: MariaDB's error numbers the store acts on, named once;
- :mod:`.dialects`: each backend's features and statements, in one place per backend (MariaDB,
  SQLite): the store asks ``dialects.of(connection)`` instead of comparing its ``vendor``.
"""
