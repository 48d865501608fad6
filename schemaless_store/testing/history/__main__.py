"""``python -m schemaless_store.testing.history``: the soak command (:mod:`.run`)."""

from __future__ import annotations

from .run import main

raise SystemExit(main())
