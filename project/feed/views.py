"""The feed's pages. Every read and write goes through :mod:`project.feed.entities`, which uses
the store's public API only.

There are no passwords: a visitor signs up or picks a user to act as, and the choice is kept in
the session. This site demonstrates the store, not authentication.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.text import Truncator

from schemaless_store import lifecycle
from schemaless_store.exceptions import (
    ConfigurationError,
    IndexNotReady,
    InvalidCursor,
    InvalidQuery,
    NoIndexForQuery,
    UniqueViolation,
)
from schemaless_store.indexes import registry
from schemaless_store.models import Entity
from schemaless_store.query.indexquery import Page

from . import entities
from .forms import ActAsForm, CommentForm, EntryForm, SignUpForm
from .models import LINK_INDEX_NAME

SESSION_KEY = "feed_user_id"
UNIQUE_FIELDS = ("username", "email")
# "Newer" links: a page's URL carries the cursors of the pages before it (``?back=``, oldest
# first), since the store's cursors only lead forward. At most this many (a cursor is about 115
# characters); past that the oldest are dropped (``?cut=1``) and "Newer" stops where the trail
# ends, while "Newest" still leads to the first page.
BACK_LIMIT = 20
# For clients that are not browsers (the load test, docs/deployment.md): what a form post did,
# since success and failure both redirect, and the id of an entry it created.
OUTCOME_HEADER = "X-Feed-Outcome"
ENTRY_HEADER = "X-Feed-Entry"


def _unique_field(violation: UniqueViolation) -> str | None:
    """The form field whose value a unique index refused. Asked of the index rather than
    assumed: indexes are global, so another app's unique index on ``username`` counts too."""
    try:
        index = registry.get(violation.index)
    except ConfigurationError:
        return None
    return next((f for f in UNIQUE_FIELDS if f in index.properties), None)


def page_size() -> int:
    return int(getattr(settings, "FEED_PAGE_SIZE", 20))


# --- the visitor ---------------------------------------------------------------------------------


def current_user(request: HttpRequest) -> Entity | None:
    """The user this visitor acts as, or None (also if that user is gone)."""
    if not hasattr(request, "_feed_user"):
        user = None
        raw = request.session.get(SESSION_KEY)
        if raw:
            try:
                user = entities.user_by_id(uuid.UUID(raw))
            except ValueError:
                user = None
            if user is None:
                request.session.pop(SESSION_KEY, None)
        request._feed_user = user  # type: ignore[attr-defined]
    return request._feed_user  # type: ignore[attr-defined]


def act_as(request: HttpRequest, user: Entity) -> None:
    request.session[SESSION_KEY] = user.id.hex
    request._feed_user = user  # type: ignore[attr-defined]


def render_page(
    request: HttpRequest, template: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    """A page of the site (a template extending ``feed/base.html``), with what its header
    needs: the user this visitor acts as. Also used by the project's error pages."""
    viewer = current_user(request)
    base = {
        "viewer": viewer,
        "act_as_form": ActAsForm(),
        "live_index": LINK_INDEX_NAME,
        "live_index_ready": live_index_ready(),
    }
    return render(request, template, {**base, **context}, status=status)


def live_index_ready() -> bool:
    """Whether "who else shared this?" can be answered: ``index_feed_link`` is declared and
    built. Until then entries do not offer the link (the page itself says what to run)."""
    return LINK_INDEX_NAME in registry and lifecycle.states().get(LINK_INDEX_NAME) == "ready"


def allow(*methods: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Like Django's ``require_http_methods``, but a request with another method gets the
    site's own 405 page (not an empty response, which browsers show as their own error)."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                response = render_page(
                    request,
                    "405.html",
                    {"request_path": request.path, "method": request.method, "allowed": methods},
                    status=405,
                )
                response["Allow"] = ", ".join(methods)
                return response
            return view(request, *args, **kwargs)

        return checked

    return decorate


def _next_url(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


def _bad_cursor(request: HttpRequest, first_page: str) -> HttpResponse:
    # Cursors are signed: a hand-edited or foreign ?after= is a client error, not a crash.
    return render_page(request, "feed/bad_cursor.html", {"first_page": first_page}, status=400)


def _paged(
    request: HttpRequest, fetch: Callable[[str | None], Page]
) -> tuple[Page | None, str | None]:
    after = request.GET.get("after") or None
    try:
        return fetch(after), after
    except InvalidCursor:
        return None, after


def _pager(
    request: HttpRequest, page: Page, after: str | None, keep: dict[str, str] | None = None
) -> dict[str, str | None]:
    """The links of a paged list: ``newest`` (the first page), ``newer`` (the page before this
    one) and ``older`` (the next one), each None where there is none. ``keep``: query parameters
    every link carries (the shared link).

    The store's cursors lead forward only, so each link carries the trail of cursors of the
    pages seen before it (``back``); "Newer" pops the last one. Cursors in the trail are not
    checked here: one that was tampered with is refused when "Newer" uses it (a 400 page).
    """
    trail = [cursor for cursor in request.GET.getlist("back") if cursor]
    cut = request.GET.get("cut") == "1" or len(trail) > BACK_LIMIT
    trail = trail[-BACK_LIMIT:]

    def link(at: str | None, earlier: list[str], was_cut: bool) -> str:
        params = list((keep or {}).items())
        if at:
            params.append(("after", at))
            params += [("back", cursor) for cursor in earlier]
            if was_cut:
                params.append(("cut", "1"))
        return f"?{urlencode(params)}" if params else request.path

    first = link(None, [], False)
    newer = None
    if after and trail:
        newer = link(trail[-1], trail[:-1], cut)
    elif after and not cut:
        newer = first  # this is the second page
    older = None
    if page.has_next:
        longer = [*trail, after] if after else []
        older = link(page.next_cursor, longer[-BACK_LIMIT:], cut or len(longer) > BACK_LIMIT)
    return {
        "newest": first if after and newer != first else None,
        "newer": newer,
        "older": older,
    }


# --- pages ---------------------------------------------------------------------------------------


@allow("GET", "HEAD")
def home(request: HttpRequest) -> HttpResponse:
    """The public feed: everyone's entries, newest first."""
    page, after = _paged(request, lambda after: entities.public_page(after, page_size()))
    if page is None:
        return _bad_cursor(request, reverse("feed:home"))
    viewer = current_user(request)
    return render_page(
        request,
        "feed/home.html",
        {
            "entries": entities.entry_views(page.entities, viewer),
            "page": page,
            "pager": _pager(request, page, after),
            "entry_form": EntryForm(),
        },
    )


@allow("GET", "HEAD")
def user_detail(request: HttpRequest, username: str) -> HttpResponse:
    """One user's entries, newest first."""
    user = entities.user_by_username(username)
    if user is None:
        raise Http404(f"no user named {username!r}")
    page, after = _paged(request, lambda after: entities.user_page(user, after, page_size()))
    if page is None:
        return _bad_cursor(request, reverse("feed:user", args=[user["username"]]))
    viewer = current_user(request)
    return render_page(
        request,
        "feed/user.html",
        {
            "profile": user,
            "entries": entities.entry_views(page.entities, viewer),
            "page": page,
            "pager": _pager(request, page, after),
            "entry_form": EntryForm() if viewer is not None and viewer.id == user.id else None,
        },
    )


@allow("GET", "HEAD")
def user_list(request: HttpRequest) -> HttpResponse:
    page, after = _paged(request, lambda after: entities.users_page(after, 50))
    if page is None:
        return _bad_cursor(request, reverse("feed:users"))
    return render_page(
        request,
        "feed/users.html",
        {"users": page.entities, "page": page, "pager": _pager(request, page, after)},
    )


@allow("GET", "HEAD", "POST")
def sign_up(request: HttpRequest) -> HttpResponse:
    form = SignUpForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            user = entities.create_user(data["username"], data["email"], data["name"])
        except UniqueViolation as exc:
            # The unique index refused the write: nothing was stored. Say which value is taken.
            field = _unique_field(exc)
            label = field or "username or email"
            form.add_error(field, f"This {label} is already taken.")
        else:
            act_as(request, user)
            messages.success(request, f"Welcome, {user['username']}! You can post now.")
            return redirect("feed:user", user["username"])
    return render_page(request, "feed/signup.html", {"form": form})


@allow("POST")
def act_as_view(request: HttpRequest) -> HttpResponse:
    form = ActAsForm(request.POST)
    user = entities.user_by_username(form.cleaned_data["username"]) if form.is_valid() else None
    if user is None:
        messages.error(request, "There is no such user.")
        response = redirect(_next_url(request, reverse("feed:users")))
        response[OUTCOME_HEADER] = "no-such-user"
        return response
    act_as(request, user)
    messages.success(request, f"You are now acting as {user['username']}.")
    response = redirect(_next_url(request, reverse("feed:user", args=[user["username"]])))
    response[OUTCOME_HEADER] = "acting"
    return response


@allow("POST")
def leave(request: HttpRequest) -> HttpResponse:
    request.session.pop(SESSION_KEY, None)
    return redirect("feed:home")


@allow("GET", "HEAD", "POST")
def post_entry(request: HttpRequest) -> HttpResponse:
    viewer = current_user(request)
    if viewer is None:
        messages.error(request, "Sign up or pick a user to act as before posting.")
        response = redirect("feed:users")
        response[OUTCOME_HEADER] = "not-acting"
        return response
    form = EntryForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        entry = entities.post_entry(viewer, form.cleaned_data["title"], form.cleaned_data["link"])
        messages.success(request, "Posted.")
        response = redirect("feed:user", viewer["username"])
        response[OUTCOME_HEADER] = "posted"
        response[ENTRY_HEADER] = str(entry.id)
        return response
    return render_page(request, "feed/post.html", {"entry_form": form})


def _entry_or_404(entry_id: uuid.UUID) -> Entity:
    entry = entities.entry_by_id(entry_id)
    if entry is None:
        raise Http404("no such entry")
    return entry


@allow("GET", "HEAD")
def entry_detail(request: HttpRequest, entry_id: uuid.UUID) -> HttpResponse:
    return _entry_page(request, _entry_or_404(entry_id), CommentForm())


def _entry_page(
    request: HttpRequest, entry: Entity, comment_form: CommentForm, status: int = 200
) -> HttpResponse:
    (view,) = entities.entry_views([entry], current_user(request))
    return render_page(
        request, "feed/entry.html", {"entry": view, "comment_form": comment_form}, status=status
    )


def _require_viewer(request: HttpRequest) -> Entity | HttpResponseRedirect:
    viewer = current_user(request)
    if viewer is None:
        messages.error(request, "Sign up or pick a user to act as first.")
        return redirect("feed:users")
    return viewer


@allow("GET", "HEAD", "POST")
def like(request: HttpRequest, entry_id: uuid.UUID) -> HttpResponse:
    entry = _entry_or_404(entry_id)
    if request.method != "POST":  # a link to it, or a reload: the entry, nothing liked
        return redirect("feed:entry", entry.id)
    viewer = _require_viewer(request)
    if isinstance(viewer, HttpResponseRedirect):
        return viewer
    liked = entities.toggle_like(entry, viewer)
    title = Truncator(entry.get("title", "")).chars(60)
    messages.success(request, f"You like “{title}”." if liked else f"You no longer like “{title}”.")
    return redirect(_next_url(request, reverse("feed:entry", args=[entry.id])))


@allow("GET", "HEAD", "POST")
def comment(request: HttpRequest, entry_id: uuid.UUID) -> HttpResponse:
    entry = _entry_or_404(entry_id)
    if request.method != "POST":  # the comment form is on the entry's page
        return redirect("feed:entry", entry.id)
    viewer = _require_viewer(request)
    if isinstance(viewer, HttpResponseRedirect):
        return viewer
    form = CommentForm(request.POST)
    if not form.is_valid():
        return _entry_page(request, entry, form, status=400)
    entities.add_comment(entry, viewer, form.cleaned_data["body"])
    messages.success(request, "Comment added.")
    return redirect("feed:entry", entry.id)


@allow("GET", "HEAD")
def shared(request: HttpRequest) -> HttpResponse:
    """Who else shared this link: the page that needs the live index ``index_feed_link``."""
    link = request.GET.get("link", "").strip()
    context: dict[str, Any] = {"link": link, "index_name": LINK_INDEX_NAME}
    if not link:
        return render_page(
            request, "feed/shared.html", {**context, "problem": "no-link"}, status=400
        )
    try:
        page, after = _paged(request, lambda after: entities.sharers_page(link, after, page_size()))
    except NoIndexForQuery:  # an InvalidQuery too: caught first
        return render_page(request, "feed/shared.html", {**context, "problem": "undeclared"}, 503)
    except InvalidQuery:
        # Not a cursor problem (those are handled by _paged): a link too long to be indexed.
        return render_page(request, "feed/shared.html", {**context, "problem": "bad-link"}, 400)
    except IndexNotReady:
        return render_page(request, "feed/shared.html", {**context, "problem": "building"}, 503)
    if page is None:
        return _bad_cursor(request, f"{reverse('feed:shared')}?{urlencode({'link': link})}")
    return render_page(
        request,
        "feed/shared.html",
        {
            **context,
            "entries": entities.entry_views(page.entities, current_user(request)),
            "page": page,
            "pager": _pager(request, page, after, keep={"link": link}),
        },
    )
