"""Indexes the test suite works with (the article's two, plus typed and composite ones)."""

from schemaless_store import Index

user_id_index = Index(table="index_user_id", properties=["user_id"], shard_on="user_id")
link_index = Index(table="index_link", properties=["link"], shard_on="link")
user_published_index = Index(
    table="index_user_published",
    properties=["user_id", "published"],
    shard_on="user_id",
    types={"published": "int"},
)
tags_index = Index(table="index_tags", properties=["tags"], shard_on="tags")
username_index = Index(
    table="index_users_username", properties=["username"], shard_on="username", unique=True
)
