"""The feed's indexes: entries by user (newest first) and by link, as in the article."""

from schemaless_store import Index

user_id_index = Index(table="index_user_id", properties=["user_id"], shard_on="user_id")
link_index = Index(table="index_link", properties=["link"], shard_on="link")
