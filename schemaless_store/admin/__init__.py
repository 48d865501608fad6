"""The operators' admin (see ``docs/admin.md``). Importing it registers every page:

- :mod:`.entities`: entities on any shard (list, search, detail and edit, delete, versions),
  with :mod:`.browse` (newest-first pages across shards), :mod:`.search` (the search box),
  :mod:`.entity_form` (the body as JSON), :mod:`.values_html` (values shown as HTML) and
  :mod:`.entity_rows` (an entity's index rows);
- :mod:`.shardmap`: the "Shards and buckets" page (the map, the shards, bucket moves)
- :mod:`.health`: the index-health page and the cleaner passes, with :mod:`.health_report`
  and :mod:`.sample_check` ("check now");
- :mod:`.cells`: the cell store, read-only; :mod:`.versions`: versions listed and compared;
- :mod:`.common`: what every page shares.
"""

from __future__ import annotations

from . import cells, entities, health, shardmap

__all__ = ["cells", "entities", "health", "shardmap"]
