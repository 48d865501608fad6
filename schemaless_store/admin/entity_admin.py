"""Entities on every shard in the admin: a merged newest-first list (:mod:`.browse`) with a
shard filter and the search box (:mod:`.search`), an entity's page (its body as JSON, editable
through the write path, and the index rows that point at it), delete, history and versions.

``Entity`` rows live on many databases and its default queryset refuses to guess which, so its
admin has its own views behind the standard URLs (``/admin/schemaless_store/entity/``, ``<id>/
change/``, ``<id>/delete/``, ``<id>/history/``), addressed by UUID. Edits and deletes go through
``entity.save()`` and ``entity.delete()``, the write path every user takes.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, DELETION
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.text import capfirst

from ..config import conf
from ..exceptions import (
    ConfigurationError,
    Conflict,
    CorruptBody,
    InvalidEntityId,
    SchemalessError,
    ShardUnavailable,
)
from ..models.entity import Entity
from ..moves.locate import locate
from ..topology import shards
from ..values import bucket_hash, jsonview
from ..writes import entity_writes
from .common import changelist_url, crumbs, entity_url, log_change, with_query
from .entity_form import CHANGED_MEANWHILE, EDIT_MAX_CHARS, EntityBodyForm, loaded_version
from .entity_listing import entity_listing
from .entity_rows import entity_rows
from .search import search_examples
from .values_html import body_html, entity_ids, preview
from .versions import version_view, versions_page

SEARCH_HELP = (
    "An entity id (32 hex digits or a dashed UUID), or conditions on an index: property=value "
    "(the value as JSON, else text), with __in, __gt, __gte, __lt or __lte, joined by ' & ', "
    "and order_by=-property; or a JSON object of the same. An entity matches only if it has "
    "every property the search names, so an index serves a search only if the search names "
    "all its properties."
)


@admin.register(Entity)
class EntityAdmin(admin.ModelAdmin):
    """Entities on every shard: a merged newest-first list, search, a detail and edit page."""

    list_per_page = 100
    search_help_text = SEARCH_HELP
    change_list_template = "admin/schemaless_store/entity/change_list.html"
    change_form_template = "admin/schemaless_store/entity/change_form.html"
    delete_confirmation_template = "admin/schemaless_store/entity/delete_confirmation.html"
    object_history_template = "admin/schemaless_store/entity/object_history.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # entities are created by the application, not typed in by operators

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Entity | None:
        """The entity with this id (any accepted form), fetched from its shard, or None."""
        try:
            return Entity.objects.get(id=object_id)
        except (Entity.DoesNotExist, InvalidEntityId):
            return None

    def _entity_or_redirect(
        self, request: HttpRequest, object_id: str, view: str
    ) -> Entity | HttpResponse:
        object_id = unquote(object_id)
        try:
            entity = self.get_object(request, object_id)
        except ShardUnavailable as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(reverse("admin:schemaless_store_entity_changelist"))
        if entity is None:
            messages.warning(
                request, f"There is no entity with id {object_id!r}. Perhaps it was deleted?"
            )
            return HttpResponseRedirect(changelist_url())
        if object_id != str(entity.id):  # one canonical URL per entity (the log links to it)
            url = entity_url(entity.id, view)
            query = request.GET.urlencode()
            return HttpResponseRedirect(url + ("?" + query if query else ""))
        return entity

    # --- the list -----------------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        all_aliases = list(shards.shard_aliases())
        shard = request.GET.get("shard", "")
        if shard and shard not in all_aliases:
            messages.error(request, f"There is no shard '{shard}'; showing every shard.")
            shard = ""
        aliases = [shard] if shard else all_aliases
        text = request.GET.get("q", "")
        listing = entity_listing(request, aliases, self.list_per_page)
        context: dict[str, Any] = listing.context()
        rows = [self._row(entity) for entity in listing.entities]
        choices = [
            {"display": "All shards", "selected": not shard, "url": _shard_url(request, None)}
        ] + [
            {"display": alias, "selected": alias == shard, "url": _shard_url(request, alias)}
            for alias in all_aliases
        ]
        context.update(
            {
                **self.admin_site.each_context(request),
                "title": "Select entity to change"
                if self.has_change_permission(request)
                else "Select entity to view",
                "opts": self.opts,
                **crumbs(self.opts, ("Entities", "")),
                "cl_rows": rows,
                "query": text,
                "shard": shard,
                "shard_choices": choices,
                "search_help_text": SEARCH_HELP,
                "search_examples": search_examples(),
                "health_url": reverse("admin:schemaless_store_indexstate_changelist"),
                **(extra_context or {}),
            }
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    def _row(self, entity: Entity) -> dict[str, Any]:
        html: str  # the preview's SafeString, or the error's text (escaped by the template)
        try:
            shown = preview(entity.body_properties(), link=entity_url)
            html, text, broken = shown.html, shown.text, False
        except CorruptBody as exc:
            html, text, broken = str(exc), str(exc), True
        return {
            "id": str(entity.id),
            "url": entity_url(entity.id),
            "shard": entity.shard,
            "bucket": bucket_hash.bucket_of(bytes(entity.row_id), conf.get().buckets),
            "updated": entity.row_updated,
            "size": len(bytes(entity.row_body)),
            "preview": html,
            "preview_text": text,
            "broken": broken,
        }

    # --- one entity -------------------------------------------------------------------------

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        found = self._entity_or_redirect(request, object_id, "change")
        if not isinstance(found, Entity):
            return found
        entity = found
        if not self.has_view_or_change_permission(request, entity):
            raise PermissionDenied
        can_change = self.has_change_permission(request, entity)
        try:
            body_json, body_error = jsonview.dumps(entity.body_properties()), ""
        except (CorruptBody, jsonview.JSONViewError) as exc:
            body_json, body_error = "", str(exc)
        shown: Any = body_json[:EDIT_MAX_CHARS]
        if body_json and len(body_json) <= EDIT_MAX_CHARS:
            shown = body_html(entity.body_properties(), link=_existing_entities(entity))
        editable = can_change and not body_error and len(body_json) <= EDIT_MAX_CHARS
        form = None
        if request.method == "POST":
            if not editable:
                raise PermissionDenied
            form = EntityBodyForm(request.POST, entity=entity)
            if form.is_valid():
                response = self._save(request, entity, form)
                if response is not None:
                    return response
        elif editable:
            form = EntityBodyForm(
                initial={"body": body_json, "loaded": loaded_version(entity)},
                entity=entity,
            )
        index_rows = entity_rows(entity)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Entity {entity.id}",
            "subtitle": None,
            "opts": self.opts,
            **crumbs(self.opts, ("Entities", changelist_url()), (str(entity.id), "")),
            "entity": entity,
            "entity_id": str(entity.id),
            "shard": entity.shard,
            "location": locate(entity.id),  # bucket, owner, server, move (shardmap --id)
            "body_size": len(bytes(entity.row_body)),
            "body_json": shown,
            "body_truncated": len(body_json) > EDIT_MAX_CHARS,
            "body_error": body_error,
            "form": form,
            "editing": form is not None and (form.is_bound or "edit" in request.GET),
            "index_rows": index_rows,
            "index_problems": sum(r.problems for r in index_rows),
            "has_delete_permission": self.has_delete_permission(request, entity),
            "delete_url": entity_url(entity.id, "delete"),
            "history_url": entity_url(entity.id, "history"),
            "versions_url": entity_url(entity.id, "versions"),
            "changelist_url": reverse("admin:schemaless_store_entity_changelist"),
            "health_url": reverse("admin:schemaless_store_indexstate_changelist"),
            "media": self.media,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_form_template, context)

    def _save(self, request: HttpRequest, entity: Entity, form: EntityBodyForm) -> Any:
        """Write the edited body through ``entity.save()``; None (with form errors) on failure."""
        new = form.cleaned_data["body"]
        old = entity.body_properties()
        if jsonview.dumps(new) == jsonview.dumps(old):
            messages.info(request, "No changes: nothing was written.")
            return HttpResponseRedirect(request.path + "?edit=1")
        changed = sorted(
            name
            for name in set(old) | set(new)
            if name not in old
            or name not in new
            or jsonview.dumps_value(old[name]) != jsonview.dumps_value(new[name])
        )
        # A fresh instance with the same id is an update of that entity through the write path:
        # the protocol locks the stored row and moves index rows from its old to its new values.
        # "Changed since the page was loaded" is checked under the write's row lock (expected.py).
        edited = Entity.from_properties({**new, "id": entity.id})
        try:
            entity_writes.save(edited, expect=form.expectation())
        except Conflict:
            form.add_error(None, CHANGED_MEANWHILE)
            return None
        except SchemalessError as exc:
            form.add_error("body", str(exc))
            return None
        log_change(request, edited, str(edited.id), CHANGE, [{"changed": {"fields": changed}}])
        self.message_user(request, f"The entity {edited.id} was changed successfully.")
        if "_continue" in request.POST:  # back to the page, its edit box open
            return HttpResponseRedirect(request.path + "?edit=1")
        return HttpResponseRedirect(reverse("admin:schemaless_store_entity_changelist"))

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        found = self._entity_or_redirect(request, object_id, "delete")
        if not isinstance(found, Entity):
            return found
        entity = found
        if not self.has_delete_permission(request, entity):
            raise PermissionDenied
        if request.method == "POST":
            try:
                entity.delete()
            except SchemalessError as exc:
                messages.error(request, f"The entity {entity.id} was not deleted: {exc}")
                return HttpResponseRedirect(entity_url(entity.id))
            log_change(request, entity, str(entity.id), DELETION, "")
            self.message_user(request, f"The entity {entity.id} was deleted.")
            return HttpResponseRedirect(reverse("admin:schemaless_store_entity_changelist"))
        rows = entity_rows(entity)
        context = {
            **self.admin_site.each_context(request),
            "title": "Are you sure?",
            "subtitle": None,
            "opts": self.opts,
            **crumbs(
                self.opts,
                ("Entities", changelist_url()),
                (str(entity.id), entity_url(entity.id)),
                ("Delete", ""),
            ),
            "entity": entity,
            "entity_id": str(entity.id),
            "shard": entity.shard,
            "index_row_count": sum(1 for r in rows for row in r.rows if row.status != "missing"),
            "change_url": entity_url(entity.id),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.delete_confirmation_template, context)

    def get_urls(self) -> list[URLPattern]:
        versions = self.admin_site.admin_view(self.versions_view)
        return [
            path(
                "<path:object_id>/versions/",
                versions,
                name="schemaless_store_entity_versions",
            ),
            *super().get_urls(),
        ]

    def versions_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Every stored version of an entity (``SCHEMALESS["HISTORY"]``), and two compared."""
        found = self._entity_or_redirect(request, object_id, "versions")
        if not isinstance(found, Entity):
            return found
        if not self.has_view_or_change_permission(request, found):
            raise PermissionDenied
        try:
            history = found.history()
            off = ""
        except ConfigurationError as exc:  # "entity history is off: set ...", said once
            history, off = [], capfirst(str(exc)) + "."
        # A version's properties as the body view shows them: the id is the entity's, not one
        # of its properties (it cannot change between versions).
        views = [version_view(v.ref_key, v.created_at, lambda v=v: _body(v)) for v in history]
        bodies = {v.ref_key: (lambda v=v: _body(v)) for v in history}
        trail = crumbs(
            self.opts,
            ("Entities", changelist_url()),
            (str(found.id), entity_url(found.id)),
            ("Versions", ""),
        )
        title = f"Versions of entity {found.id}"
        return versions_page(self, request, title, trail, views, bodies, [], off)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        found = self._entity_or_redirect(request, object_id, "history")
        if not isinstance(found, Entity):
            return found
        return super().history_view(
            request,
            str(found.id),
            {
                **crumbs(
                    self.opts,
                    ("Entities", changelist_url()),
                    (str(found.id), entity_url(found.id)),
                    ("History", ""),
                ),
                **(extra_context or {}),
            },
        )


def _existing_entities(entity: Entity) -> Any:
    """Links for the ids in an entity's body that are entities (one read per shard); when a
    shard cannot be read, every id links (its page says if there is no such entity)."""
    ids = entity_ids(entity.body_properties())
    try:
        found = {str(i) for i in Entity.objects.get_many(ids)} if ids else set()
    except ShardUnavailable:
        return entity_url
    return lambda text: entity_url(text) if text in found else None


def _shard_url(request: HttpRequest, alias: str | None) -> str:
    # A new filter starts from the first page: a cursor belongs to the old filter's order.
    return with_query(request, shard=alias, after=None, before=None, p=None)


def _body(version: Any) -> dict[str, Any] | None:
    """A stored version's properties without the entity's id (None: it was deleted)."""
    if version.properties is None:
        return None
    return {name: value for name, value in version.properties.items() if name != "id"}
