"""Kinds: typed Django models whose instances are entities (docs/kinds.md). ``Kind`` is also
``schemaless_store.Kind``, given lazily by the package root.

- :mod:`.options`: what a kind declares (its name, fields, ``extra``, indexes), collected once;
- :mod:`.kind`: :class:`Kind` and its metaclass; validation and ``save()``;
- :mod:`.manager`: ``Entry.objects``, with the kind pinned; :mod:`.queryset`: its Django
  querysets (``using(alias)``, ``filter(id=...)``), pinned too;
- :mod:`.admin`: :class:`~.admin.KindAdmin`; :mod:`.rest`: the optional REST extra.
"""

from __future__ import annotations

from .kind import Kind, KindBase
from .manager import KindManager
from .query import KindQuery
from .references import DANGLE, ReferenceField

__all__ = ["DANGLE", "Kind", "KindBase", "KindManager", "KindQuery", "ReferenceField"]
