"""The entity cache (:mod:`.entity_cache`: reads through it, invalidation after commits), the
Django backend it runs on (:mod:`.backend`), its one-round-trip script (:mod:`.script`) and
the near cache of hits in process memory (:mod:`.near_cache`); docs/cache.md."""
