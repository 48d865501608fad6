"""The indexes of a history run (``SCHEMALESS["INDEX_MODULE"]`` in :mod:`.settings`):

- the registers' ``value``, sharded on that value, so that most of a write's index rows live on
  another shard than its entity and move with other buckets. The clients' ``find`` queries it
  (:mod:`.client`); the checker proves its answers (:mod:`.checker`, ``index_missed`` and
  ``index_wrong``);
- the claims' ``claim``, a unique index: two claim keys never hold one token at once
  (the checker's ``unique_violated``), and a claim refused with ``UniqueViolation`` wrote
  nothing (``failed_present``)."""

from schemaless_store.config.indexes import Index
from schemaless_store.testing.history import variant

if variant.value_indexed():  # else (--no-value-index) a partial update of it may go to the server
    value_index = Index(table="index_history_value", properties=["value"], shard_on="value")
claim_index = Index(
    table="index_history_claim", properties=["claim"], shard_on="claim", unique=True
)
