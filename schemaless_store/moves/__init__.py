"""Bucket moves (``manage.py movebuckets``): growing a live store onto another shard server.

:mod:`.plan` checks a move and counts its rows, :mod:`.decide` picks what ``movebuckets`` does
(resume, nothing to do, a dry run or a new move), :mod:`.mover` runs the phases, :mod:`.record`
tells a move in words and :mod:`.phase_bars` draws a bar per phase. What a move copies is
:mod:`..tables.moved_rows`, how it learns of the changes made while it copies
:mod:`..tables.move_log`. docs/resharding.md tells the operator's side.
"""
