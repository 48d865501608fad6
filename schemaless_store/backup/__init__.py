"""Backups and a way in: the store as JSON Lines, and entities from a Django model.

- :mod:`.lines`: the format, one JSON object per line (docs/backup.md);
- :mod:`.export`: :class:`~.export.Exporter`, every entity (and cell) shard after shard;
- :mod:`.importer`: :class:`~.importer.Importer`, items written through ``bulk_put``'s code;
- :mod:`.items`, :mod:`.jsonfile`, :mod:`.frommodel`: what an import reads (a file, or the
  rows of a model).

The commands ``exportentities`` and ``importentities`` parse options and hand them over.
"""
