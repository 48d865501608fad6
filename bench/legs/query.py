"""Leg 3: index queries for a user with ~100 entities.

- ``page``: the 30 newest entities of a user (composite index ``(user_id, published)``):
  ``filter_index(user_id=u).order_by("-published")[:30]`` vs raw SQL doing index, then entities,
  then decode and re-check by hand, vs the peer's one query on its JSON table (virtual column
  index).
- ``all``: every entity of a user (``filter_index(user_id=u)``), the same three, plus Django's
  ``JSONField`` filter ``body__user_id=u`` without an index.

Before timing, the contenders' answers are compared: same entities, same order.
"""

from __future__ import annotations

from typing import Any

from ..context import Bench
from ..stats import Contender, compare, result

PAGE = 30


def page_contenders(bench: Bench, ops: int) -> list[Contender]:
    from schemaless_store.models import Entity

    def ours(user: int) -> list[Any]:
        page = list(Entity.objects.filter_index(user_id=user).order_by("-published")[:PAGE])
        return [entity.body_properties() for entity in page]

    return [
        Contender("ours", ours, ops),
        Contender("raw", lambda user: bench.raw.page(user, PAGE), ops),
        Contender("json_column", lambda user: bench.peer.page(user, PAGE), ops),
    ]


def all_contenders(bench: Bench, ops: int, unindexed_ops: int) -> list[Contender]:
    from bench.benchapp.models import JsonEntity
    from schemaless_store.models import Entity

    def ours(user: int) -> list[Any]:
        return [entity.body_properties() for entity in Entity.objects.filter_index(user_id=user)]

    def unindexed(user: int) -> list[Any]:
        return [row.body for row in JsonEntity.objects.filter(body__user_id=user)]

    return [
        Contender("ours", ours, ops),
        Contender("raw", bench.raw.all_of_user, ops),
        Contender("json_column", bench.peer.all_of_user, ops),
        Contender("json_unindexed", unindexed, unindexed_ops),
    ]


def _titles(found: list[dict[str, Any]], ordered: bool) -> list[str]:
    titles = [props["title"] for props in found]
    return titles if ordered else sorted(titles)


def check_answers(bench: Bench, contenders: list[Contender], ordered: bool) -> int:
    """Every contender returns the same entities (in the same order when ``ordered``)."""
    user = bench.random_user()
    answers = {c.name: _titles(c.op(user), ordered) for c in contenders}
    first = next(iter(answers.values()))
    for name, titles in answers.items():
        if titles != first:
            raise AssertionError(f"user {user}: {name} answered {titles[:3]}..., not {first[:3]}")
    return len(first)


def random_users(bench: Bench, n: int) -> list[int]:
    return [bench.random_user() for _ in range(n)]


def _placed_names() -> tuple[str, str]:
    from ..data import placed as placed_run

    # Placed entities (bench.run --placed) are reported as legs of their own.
    return ("_placed", " (entities placed with user_id)") if placed_run() else ("", "")


def run_page(bench: Bench) -> dict[str, Any]:
    """The page comparison alone (the netem leg runs it too)."""
    suffix, placed = _placed_names()
    page = page_contenders(bench, bench.plan.query_ops)
    page_hits = check_answers(bench, page, ordered=True)
    page_timings = compare(page, lambda _r, n: random_users(bench, n), bench.plan.rounds)
    return result(
        page_timings,
        [("ours", "raw"), ("ours", "json_column")],
        leg="query_page" + suffix,
        size=bench.size,
        hits=page_hits,
        what=f'filter_index(user_id=u).order_by("-published")[:{PAGE}] vs raw index+IN+'
        "decode+re-check vs JSON column with a virtual-column index" + placed,
    )


def run(bench: Bench) -> list[dict[str, Any]]:
    suffix, placed = _placed_names()
    plan = bench.plan
    page = run_page(bench)
    everything = all_contenders(bench, plan.query_ops, plan.unindexed_ops)
    all_hits = check_answers(bench, everything, ordered=False)
    all_timings = compare(everything, lambda _r, n: random_users(bench, n), plan.rounds, warmup=1)
    return [
        page,
        result(
            all_timings,
            [("ours", "raw"), ("ours", "json_column"), ("ours", "json_unindexed")],
            leg="query_all" + suffix,
            size=bench.size,
            hits=all_hits,
            what="filter_index(user_id=u), every entity of a user, vs raw, vs JSON column "
            "with index, vs JSONField .filter(body__user_id=u) without index" + placed,
        ),
    ]
