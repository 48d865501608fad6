"""Bucket moves (``manage.py movebuckets``): growing a live store onto another shard server.

:mod:`.tables` is what a move copies, :mod:`.capture` how it learns of the changes made while
it copies, :mod:`.mover` the phases. docs/resharding.md tells the operator's side.
"""
