"""A Jepsen-style history of the store under faults (issue 34; docs/reliability.md).

Three parts, as in Jepsen and Elle: a workload of client processes whose every invocation and
completion is recorded (:mod:`.client`, :mod:`.records`), nemeses that inject faults from
outside (:mod:`.nemesis`; lost commit answers inside the clients), and a checker that reads
only the recorded history (:mod:`.checker`). :mod:`.run` ties them into the soak command,
``python -m schemaless_store.testing.history``, on a throwaway store (:mod:`.servers`).
"""
