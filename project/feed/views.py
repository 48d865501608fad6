"""The feed's pages, on the models of :mod:`.models`: ``Entry.objects`` sees only entries and
queries only the indexes declared on ``Entry``, and so on for users, likes and comments.

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
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.text import Truncator

from schemaless_store.config.indexes import registry
from schemaless_store.exceptions import (
    IndexNotReady,
    InvalidCursor,
    InvalidEntityId,
    InvalidQuery,
    NoIndexForQuery,
    UniqueViolation,
)
from schemaless_store.kinds.query import KindQuery
from schemaless_store.query.indexquery import Page
from schemaless_store.tables import lifecycle

from .forms import ActAsForm, CommentForm, EntryForm, SignUpForm
from .models import LINK_INDEX_NAME, Comment, Entry, Like, User

SESSION_KEY = "feed_user_id"
# "Newer" links: a page's URL carries the cursors of the pages before it (``?back=``, oldest
# first), since the store's cursors only lead forward. At most this many (a cursor is about 115
# characters); past that the oldest are dropped (``?cut=1``) and "Newer" stops where the trail
# ends, while "Newest" still leads to the first page.
BACK_LIMIT = 20
# For clients that are not browsers (the load test, docs/deployment.md): what a form post did,
# since success and failure both redirect, and the id of an entry it created.
OUTCOME_HEADER = "X-Feed-Outcome"
ENTRY_HEADER = "X-Feed-Entry"


# --- the visitor ---------------------------------------------------------------------------------


def current_user(request: HttpRequest) -> User | None:
    """The user this visitor acts as, or None (also if that user is gone)."""
    if not hasattr(request, "_feed_user"):
        user = None
        raw = request.session.get(SESSION_KEY)
        if raw:
            try:
                user = User.objects.get(id=raw)
            except (User.DoesNotExist, InvalidEntityId):
                request.session.pop(SESSION_KEY, None)
        request._feed_user = user  # type: ignore[attr-defined]
    return request._feed_user  # type: ignore[attr-defined]


def act_as(request: HttpRequest, user: User) -> None:
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
    request: HttpRequest, query: KindQuery, size: int | None = None
) -> tuple[Page | None, str | None]:
    """The page of ``query`` that ``?after=`` asks for (None for a cursor that is not ours)."""
    after = request.GET.get("after") or None
    try:
        return query.page(after=after, size=size or getattr(settings, "FEED_PAGE_SIZE", 20)), after
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


def _with_activity(entries: list[Entry], viewer: User | None) -> list[Entry]:
    """Give each entry its ``author`` (its ``user`` reference: the page's queries read them
    with ``select_related("user")``, one ``get_many`` for the page), ``likers``, ``comments``
    (oldest first, each with its ``author``) and ``liked_by_viewer``: one index query for the
    likes and one for the comments of all the entries, and one ``get_many`` (a query per shard)
    for the people in them."""
    if not entries:
        return entries
    ids = [entry.id for entry in entries]
    likes = list(Like.objects.filter(entry_id__in=ids).order_by("created"))
    comments = list(Comment.objects.filter(entry_id__in=ids).order_by("created"))
    people = {item.user_id for item in [*likes, *comments]}
    users = User.objects.get_many(p for p in people if isinstance(p, uuid.UUID))
    by_id = {entry.id: entry for entry in entries}
    for entry in entries:
        entry.author = entry.user
        entry.likers, entry.comments, entry.liked_by_viewer = [], [], False
    for like in likes:
        if like.user_id in users:
            by_id[like.entry_id].likers.append(users[like.user_id])
        if viewer is not None and like.user_id == viewer.id:
            by_id[like.entry_id].liked_by_viewer = True
    for comment in comments:
        comment.author = users.get(comment.user_id)
        by_id[comment.entry_id].comments.append(comment)
    return entries


# --- pages ---------------------------------------------------------------------------------------


@allow("GET", "HEAD")
def home(request: HttpRequest) -> HttpResponse:
    """The public feed: everyone's entries, newest first."""
    entries = Entry.objects.order_by("-published").select_related("user")
    page, after = _paged(request, entries)
    if page is None:
        return _bad_cursor(request, reverse("feed:home"))
    return render_page(
        request,
        "feed/home.html",
        {
            "entries": _with_activity(page.entities, current_user(request)),
            "page": page,
            "pager": _pager(request, page, after),
            "entry_form": EntryForm(),
        },
    )


@allow("GET", "HEAD")
def user_detail(request: HttpRequest, username: str) -> HttpResponse:
    """One user's entries, newest first: one shard (the one that owns the user's id) answers."""
    user = User.named(username)
    if user is None:
        raise Http404(f"no user named {username!r}")
    entries = Entry.objects.filter(user=user).order_by("-published").select_related("user")
    page, after = _paged(request, entries)
    if page is None:
        return _bad_cursor(request, reverse("feed:user", args=[user.username]))
    viewer = current_user(request)
    return render_page(
        request,
        "feed/user.html",
        {
            "profile": user,
            "entries": _with_activity(page.entities, viewer),
            "page": page,
            "pager": _pager(request, page, after),
            "entry_form": EntryForm() if viewer is not None and viewer.id == user.id else None,
        },
    )


@allow("GET", "HEAD")
def user_list(request: HttpRequest) -> HttpResponse:
    page, after = _paged(request, User.objects.order_by("username"), size=50)
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
        try:
            user = form.save()
        except UniqueViolation as exc:
            # The unique index refused the write: nothing was stored. Say which value is taken.
            form.add_error(None, User.unique_error(exc))
        else:
            act_as(request, user)
            messages.success(request, f"Welcome, {user.username}! You can post now.")
            return redirect("feed:user", user.username)
    return render_page(request, "feed/signup.html", {"form": form})


@allow("POST")
def act_as_view(request: HttpRequest) -> HttpResponse:
    form = ActAsForm(request.POST)
    user = User.named(form.cleaned_data["username"]) if form.is_valid() else None
    if user is None:
        messages.error(request, "There is no such user.")
        response = redirect(_next_url(request, reverse("feed:users")))
        response[OUTCOME_HEADER] = "no-such-user"
        return response
    act_as(request, user)
    messages.success(request, f"You are now acting as {user.username}.")
    response = redirect(_next_url(request, reverse("feed:user", args=[user.username])))
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
    form = EntryForm(request.POST or None, instance=Entry(user=viewer))
    if request.method == "POST" and form.is_valid():
        entry = form.save()
        messages.success(request, "Posted.")
        response = redirect("feed:user", viewer.username)
        response[OUTCOME_HEADER] = "posted"
        response[ENTRY_HEADER] = str(entry.id)
        return response
    return render_page(request, "feed/post.html", {"entry_form": form})


@allow("GET", "HEAD")
def entry_detail(request: HttpRequest, entry_id: uuid.UUID) -> HttpResponse:
    entry = get_object_or_404(Entry.objects.select_related("user"), id=entry_id)
    return _entry_page(request, entry, CommentForm())


def _entry_page(
    request: HttpRequest, entry: Entry, comment_form: CommentForm, status: int = 200
) -> HttpResponse:
    _with_activity([entry], current_user(request))
    return render_page(
        request, "feed/entry.html", {"entry": entry, "comment_form": comment_form}, status=status
    )


def _require_viewer(request: HttpRequest) -> User | HttpResponseRedirect:
    viewer = current_user(request)
    if viewer is None:
        messages.error(request, "Sign up or pick a user to act as first.")
        return redirect("feed:users")
    return viewer


@allow("GET", "HEAD", "POST")
def like(request: HttpRequest, entry_id: uuid.UUID) -> HttpResponse:
    entry = get_object_or_404(Entry.objects, id=entry_id)
    if request.method != "POST":  # a link to it, or a reload: the entry, nothing liked
        return redirect("feed:entry", entry.id)
    viewer = _require_viewer(request)
    if isinstance(viewer, HttpResponseRedirect):
        return viewer
    liked = Like.toggle(entry, viewer)
    title = Truncator(entry.title).chars(60)
    messages.success(request, f"You like “{title}”." if liked else f"You no longer like “{title}”.")
    return redirect(_next_url(request, reverse("feed:entry", args=[entry.id])))


@allow("GET", "HEAD", "POST")
def comment(request: HttpRequest, entry_id: uuid.UUID) -> HttpResponse:
    entry = get_object_or_404(Entry.objects, id=entry_id)
    if request.method != "POST":  # the comment form is on the entry's page
        return redirect("feed:entry", entry.id)
    viewer = _require_viewer(request)
    if isinstance(viewer, HttpResponseRedirect):
        return viewer
    form = CommentForm(request.POST, instance=Comment(entry_id=entry.id, user_id=viewer.id))
    if not form.is_valid():
        return _entry_page(request, entry, form, status=400)
    form.save()
    messages.success(request, "Comment added.")
    return redirect("feed:entry", entry.id)


@allow("GET", "HEAD")
def shared(request: HttpRequest) -> HttpResponse:
    """Who else shared this link, first shared first: the page that needs the live index
    ``index_feed_link`` (``NoIndexForQuery`` until it is declared, ``IndexNotReady`` until the
    cleaner has built it)."""
    link = request.GET.get("link", "").strip()
    context: dict[str, Any] = {"link": link, "index_name": LINK_INDEX_NAME}
    if not link:
        return render_page(
            request, "feed/shared.html", {**context, "problem": "no-link"}, status=400
        )
    try:
        entries = Entry.objects.filter(link=link).order_by("published").select_related("user")
        page, after = _paged(request, entries)
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
            "entries": _with_activity(page.entities, current_user(request)),
            "page": page,
            "pager": _pager(request, page, after, keep={"link": link}),
        },
    )
