"""Benchmarks: the store against what users would pick instead, in one run.

``python -m bench.run --help``; see ``docs/performance.md`` for the legs, the sizes and the
latest results.
"""
