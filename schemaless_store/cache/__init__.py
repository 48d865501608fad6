"""The entity cache (:mod:`.entity_cache`), its one-round-trip script (:mod:`.script`) and the
near cache of hits in process memory (:mod:`.near_cache`); docs/cache.md."""
