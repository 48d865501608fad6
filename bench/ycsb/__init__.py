"""YCSB's core workloads (Cooper et al., SoCC 2010) against the store and MariaDB's own tables:
``python -m bench.ycsb`` (:mod:`.run`)."""
