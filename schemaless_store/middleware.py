"""The store's middleware.

``ShardUnavailablePage``: a page that needs a shard that is down answers a clear 503 page (with
``Retry-After``), not a 500; pages that do not need it keep serving (docs/deployment.md).
``server_error``, set as the project's ``handler500``, does the same for a database found down
outside a view (a middleware loading or saving the session, a response rendered later).

``ReadYourWrites``: a user's reads from replicas see that user's writes of earlier requests
(docs/replicas.md).

Within a request, each thread keeps the GTID positions of its writes on each shard
(:mod:`.topology.replicas`). This middleware starts each request from the positions its user's
earlier requests wrote, carried in a signed cookie, and sets the cookie again when the request
wrote, so that a read right after a redirect (a form post, then the page that shows it) is not
served by a replica that has not applied that write yet. It carries database positions, not a
timer (django-multidb-router pins a user to the primary for a while; this pins only until a
replica has caught up).

Add ``"schemaless_store.middleware.ReadYourWrites"`` to ``MIDDLEWARE``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.template import loader
from django.utils.deprecation import MiddlewareMixin
from django.views import defaults
from django.views.decorators.csrf import requires_csrf_token
from django.views.defaults import ERROR_500_TEMPLATE_NAME

from .exceptions import NotOwner
from .topology import bucket_map, replicas, shards

logger = logging.getLogger("schemaless_store.middleware")

COOKIE = "schemaless_positions"
SALT = "schemaless_store.middleware.ReadYourWrites"
# Seconds the cookie lives: a replica that has not applied a write after this long lags past
# any sane REPLICA_MAX_LAG and is not read anyway.
MAX_AGE = 300


# Seconds a client is asked to wait before trying again: a restarted server or a failed-over
# node is back in seconds; a browser does not retry on its own anyway.
RETRY_AFTER = 5
# The page: the project's ``503.html`` if it has one, else the store's own. Both are rendered
# without context processors, so that nothing in them reads a database in turn.
TEMPLATES_503 = ["503.html", "schemaless_store/503.html"]
UNAVAILABLE_HEADER = "X-Schemaless-Unavailable"


class ShardUnavailablePage(MiddlewareMixin):
    """Answer 503 (``Retry-After``) for a view that failed because a database could not be
    reached: :class:`~.exceptions.ShardUnavailable` (a shard down after the store's own
    retries), or Django's ``OperationalError`` for a lost or refused connection (``default``
    down). The header ``X-Schemaless-Unavailable`` names the alias for load tests and proxies;
    the page itself does not. Every other exception is left to Django (a 500).

    Add ``"schemaless_store.middleware.ShardUnavailablePage"`` to ``MIDDLEWARE``.
    """

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return unavailable_page(request, exception)


def unavailable_page(request: HttpRequest, exception: BaseException) -> HttpResponse | None:
    """The 503 page if ``exception`` (or what it was raised from) says a database cannot be
    reached (:func:`.topology.shards.unreachable`), or that a bucket move stayed mid-flip for
    longer than ``MOVE_WAIT`` (:func:`mid_move`), else None."""
    alias = shards.unreachable(exception) or mid_move(exception)
    if alias is None:
        return None
    logger.warning(
        "%s %s: 503, %s is unavailable (%s)", request.method, request.path, alias, exception
    )
    try:
        body = loader.select_template(TEMPLATES_503).render({"request_path": request.path})
    except Exception:  # the page must not fail in turn
        logger.exception("the 503 page could not be rendered")
        body = "<h1>Service unavailable</h1><p>Try again in a few seconds.</p>"
    response = HttpResponse(body, status=503)
    response["Retry-After"] = str(RETRY_AFTER)
    response[UNAVAILABLE_HEADER] = alias
    return response


def mid_move(exc: BaseException) -> str | None:
    """``"<alias> (moving)"`` when ``exc`` (or what it was raised from) is a write refused by a
    shard whose buckets a move is flipping (:class:`NotOwner`) or a read routed by a map a move
    left behind (:class:`.topology.bucket_map.StaleRead`), after the store waited
    ``MOVE_WAIT`` for the flip: a mover killed mid-flip, until it is run again
    (docs/resharding.md). Trying again later is the answer, as for a server that is down."""
    found: BaseException | None = exc
    for _depth in range(5):
        if isinstance(found, NotOwner):
            return f"{found.alias} (moving)"
        if isinstance(found, bucket_map.StaleRead):
            return "bucket map (moving)"
        if found is None:
            return None
        found = found.__cause__
    return None


@requires_csrf_token
def server_error(
    request: HttpRequest, template_name: str = ERROR_500_TEMPLATE_NAME
) -> HttpResponse:
    """A ``handler500`` (``handler500 = "schemaless_store.middleware.server_error"`` in the root
    URLconf): the 503 page when the exception being handled says a database cannot be reached,
    wherever it was raised (``process_exception`` sees only a view's: a middleware's, such as
    the session's load or save on ``default``, reaches Django's 500 handler instead); else
    Django's own 500 page. Django still logs the request as an error and sends
    ``got_request_exception``, as for any unhandled exception."""
    exception = sys.exc_info()[1]
    if exception is not None:
        response = unavailable_page(request, exception)
        if response is not None:
            return response
    return defaults.server_error(request, template_name)


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
