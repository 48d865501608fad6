"""The feed's URLs (namespace ``feed``), mounted at the site root by ``project/urls.py``."""

from __future__ import annotations

from django.urls import include, path, re_path

from . import api, views

app_name = "feed"

urlpatterns = [
    path("", views.home, name="home"),
    path("users/", views.user_list, name="users"),
    path("signup/", views.sign_up, name="signup"),
    path("act-as/", views.act_as_view, name="act_as"),
    path("leave/", views.leave, name="leave"),
    path("post/", views.post_entry, name="post"),
    path("shared/", views.shared, name="shared"),
    path("e/<uuid:entry_id>/", views.entry_detail, name="entry"),
    path("e/<uuid:entry_id>/json/", api.entry_json, name="entry_json"),
    path("api/", include("project.feed.rest")),
    path("e/<uuid:entry_id>/like/", views.like, name="like"),
    path("e/<uuid:entry_id>/comment/", views.comment, name="comment"),
    # The same characters the sign-up form allows: anything else cannot be a user.
    re_path(r"^u/(?P<username>[A-Za-z0-9_]{1,30})/$", views.user_detail, name="user"),
]
