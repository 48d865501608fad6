"""The feed's kinds in the admin, each with its own list, search and edit pages
(:class:`~schemaless_store.kinds.admin.KindAdmin`); the raw entity view stays for operators."""

from __future__ import annotations

from django.contrib import admin

from schemaless_store.kinds.admin import KindAdmin

from .models import Comment, Entry, Like, User


@admin.register(User)
class UserAdmin(KindAdmin):
    list_display = ["username", "email", "name", "joined"]
    search_fields = ["=username", "=email"]
    ordering = ["username"]


@admin.register(Entry)
class EntryAdmin(KindAdmin):
    list_display = ["title", "user", "published", "link"]
    list_filter = ["published"]
    ordering = ["-published"]


admin.site.register(Like, KindAdmin)
admin.site.register(Comment, KindAdmin)
