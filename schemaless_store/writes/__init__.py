"""The write path (docs/design.md#write-protocol).

- :mod:`.protocol`: the one protocol every writer runs (lock, rows, index rows, commit, stale
  removal, undo), with :class:`~.protocol.Write` and :func:`~.protocol.run`;
- :mod:`.entity_writes`: ``save``, ``create``, ``bulk_put`` and ``delete`` of entities;
- :mod:`.rows`: what an entity implies (its body, its index rows), validated before writing;
- :mod:`.index_writes`: adding and deleting index rows where they belong, unique claims.

Cells (``Cell.objects.put``) run the same protocol from :mod:`schemaless_store.cells.store`.
"""
