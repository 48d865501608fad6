"""The operators' admin (see ``docs/admin.md``). Importing it registers every page:

- :mod:`.entity_admin`: entities on any shard (list, search, detail and edit, delete, versions),
  with :mod:`.browse` (newest-first pages across shards), :mod:`.search` (the search box),
  :mod:`.entity_form` (the body as JSON), :mod:`.values_html` (values shown as HTML) and
  :mod:`.entity_rows` (an entity's index rows);
- :mod:`.shards_page`: the "Shards and buckets" page (the map, the shards, bucket moves)
- :mod:`.health`: the index-health page and the cleaner passes, with :mod:`.health_report`
  and :mod:`.sample_check` ("check now");
- :mod:`.cell_admin`: the cell store, read-only; :mod:`.versions`: versions listed and compared;
- :mod:`.common`: what every page shares.
"""

from __future__ import annotations

from . import cell_admin, entity_admin, health, shards_page

__all__ = ["cell_admin", "entity_admin", "health", "shards_page"]
