"""A Jepsen-style history of the store under faults (issues 34 and 43; docs/reliability.md).

Three parts, as in Jepsen and Elle: a workload of client processes whose every invocation and
completion is recorded (:mod:`.workload`, :mod:`.client`, :mod:`.records`), nemeses that inject
faults from outside (:mod:`.nemesis`; lost and killed commit answers inside the clients,
:mod:`.commit_kill`), and a checker that reads only the recorded history (:mod:`.checker`,
:mod:`.findings`). :mod:`.run` ties them into the soak command,
``python -m schemaless_store.testing.history``, on a throwaway store (:mod:`.servers`), and
counts what the run did (:mod:`.summary`).
"""
