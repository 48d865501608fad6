"""The indexes the benchmark legs query: the article's page of a user's entries, newest first.

The live index-add leg declares an index on ``link`` on a loaded store at run time, in the
benchmark's process; ``BENCH_LINK_INDEX=<table>`` declares the same index here, for the child
process that runs ``manage.py runcleaner`` on it.
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

if os.environ.get("BENCH_LINK_INDEX"):
    link_index = Index(table=os.environ["BENCH_LINK_INDEX"], properties=["link"], shard_on="link")

if os.environ.get("BENCH_YCSB"):  # bench.ycsb: workload E's scans in key order
    ycsb_key_index = Index(table="index_ycsb_key", properties=["ns", "ykey"], shard_on="ns")
