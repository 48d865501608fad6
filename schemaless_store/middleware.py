"""``ReadYourWrites``: a user's reads from replicas see that user's writes of earlier requests
(docs/replicas.md).

Within a request, each thread keeps the GTID positions of its writes on each shard
(:mod:`.replicas`). This middleware starts each request from the positions its user's earlier
requests wrote, carried in a signed cookie, and sets the cookie again when the request wrote,
so that a read right after a redirect (a form post, then the page that shows it) is not served
by a replica that has not applied that write yet. It carries database positions, not a timer
(django-multidb-router pins a user to the primary for a while; this pins only until a replica
has caught up).

Add ``"schemaless_store.middleware.ReadYourWrites"`` to ``MIDDLEWARE``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.core import signing
from django.http import HttpRequest, HttpResponse

from .topology import replicas

COOKIE = "schemaless_positions"
SALT = "schemaless_store.middleware.ReadYourWrites"
# Seconds the cookie lives: a replica that has not applied a write after this long lags past
# any sane REPLICA_MAX_LAG and is not read anyway.
MAX_AGE = 300


class ReadYourWrites:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        carried = _load(request)
        token = replicas.set_positions(carried)
        try:
            response = self.get_response(request)
            now = dict(replicas.positions())
        finally:
            replicas.reset_positions(token)
        if now != carried:
            response.set_signed_cookie(
                COOKIE,
                json.dumps(now, sort_keys=True),
                salt=SALT,
                max_age=MAX_AGE,
                httponly=True,
                samesite="Lax",
            )
        return response


def _load(request: HttpRequest) -> dict[str, str]:
    try:
        text = request.get_signed_cookie(COOKIE, salt=SALT, max_age=MAX_AGE)
        found: Any = json.loads(text or "{}")
    except (KeyError, signing.BadSignature, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): str(v) for k, v in found.items() if isinstance(v, str)}
