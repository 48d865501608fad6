"""Cells: versioned values with their history (:mod:`.store`) and the change feed that reads
them in commit order (:mod:`.feed`); docs/cells.md."""
