"""The read path (docs/design.md#read-path).

- :mod:`.indexquery`: ``filter_index(...)``, the lazy :class:`~.indexquery.IndexQuery` and its
  pages; :mod:`.cursors`: its signed page cursors;
- :mod:`.conditions`: the lookups, parsed, and bound to an index's column values;
- :mod:`.planner`: which index serves a query, and why each other one does not;
- :mod:`.scan`: reading index rows from one shard or several at once (:mod:`.pool`);
- :mod:`.fetch`: entities by id (``get``, ``get_many``, a query's batches);
- :mod:`.allentities`: ``Entity.objects.all()``, every entity shard after shard.
"""
