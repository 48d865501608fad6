"""What a history run varies, set by the runner (``--codec``, ``--no-value-index``) in the
environment that every process of the run inherits: :mod:`.settings` reads the codec,
:mod:`.indexes` whether the registers' value is indexed, and :mod:`.workload` leaves out
``find`` (an index query) when it is not."""

from __future__ import annotations

import os

CODEC_ENV = "SCHEMALESS_HISTORY_CODEC"
VALUE_INDEX_ENV = "SCHEMALESS_HISTORY_VALUE_INDEX"
CODECS = {
    "msgpack": "schemaless_store.values.codec.MsgpackCodec",
    "json": "schemaless_store.values.codec.JsonCodec",
}


def codec() -> str:
    return os.environ.get(CODEC_ENV, CODECS["msgpack"])


def value_indexed() -> bool:
    return os.environ.get(VALUE_INDEX_ENV, "1") != "0"
