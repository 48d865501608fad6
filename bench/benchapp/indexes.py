"""The indexes the benchmark legs query: the article's page of a user's entries, newest first.

``index_link`` is the index the live index-add leg declares on a loaded store; it is declared
only when ``BENCH_LINK_INDEX=1`` so that child processes (the cleaner) see it too.
"""

import os

from schemaless_store import Index

user_id_index = Index(table="index_user_id", properties=["user_id"], shard_on="user_id")
user_published_index = Index(
    table="index_user_published",
    properties=["user_id", "published"],
    shard_on="user_id",
    types={"published": "int"},
)

if os.environ.get("BENCH_LINK_INDEX") == "1":
    link_index = Index(table="index_link", properties=["link"], shard_on="link")
