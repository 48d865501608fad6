"""The operators' admin: entities on any shard, and index health.

``Entity`` rows live on many databases and its default queryset refuses to guess which, so its
admin has its own views behind the standard URLs (``/admin/schemaless_store/entity/``, ``<id>/
change/``, ``<id>/delete/``, ``<id>/history/``). Objects are addressed by their UUID, not by the
per-shard ``added_id`` primary key. Edits and deletes go through ``entity.save()`` and
``entity.delete()``, the write path every user takes, so index rows stay right.

The ``IndexState`` changelist *is* the index-health page (:mod:`.health`), with a "check now"
action (POST, change permission on index states). Cleaner passes get a read-only list.
See ``docs/admin.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import uuid
from typing import Any
from urllib.parse import urlencode

import django
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.admin.utils import unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from . import admin_versions, conf, health, jsonview, keys, shards
from .admin_browse import Cursor, SearchError, index_results, newest_page, parse_search
from .exceptions import (
    ConfigurationError,
    CorruptBody,
    InvalidCell,
    InvalidEntityId,
    SchemalessError,
    ShardUnavailable,
)
from .indexes import is_identifier
from .models import Cell, CleanerPass, Entity, IndexState

# Larger bodies are shown truncated and cannot be edited here: a browser chokes on a textarea
# of many megabytes, and Django refuses such a POST (DATA_UPLOAD_MAX_MEMORY_SIZE) anyway.
EDIT_MAX_CHARS = 1_000_000
PREVIEW_CHARS = 160

SEARCH_HELP = (
    "An entity id (32 hex digits or a dashed UUID), or an indexed property: property=value "
    "(value as JSON, else text: link=https://example.com/x, published__gte=1700000000, "
    'user_id={"$bytes": "00ff..."}), or a JSON object of such conditions.'
)


def entity_url(entity_id: Any, view: str = "change") -> str:
    """The admin URL of an entity (``view``: change, delete or history)."""
    return reverse(f"admin:schemaless_store_entity_{view}", args=[str(entity_id)])


def _log(request: HttpRequest, obj: Any, object_id: str, flag: int, message: Any) -> None:
    # LogEntry.objects.log_actions() records obj.pk, which for an entity is a per-shard
    # added_id: the log must name the entity by its id so its links lead back to it.
    LogEntry.objects.create(
        user_id=request.user.pk,
        content_type_id=ContentType.objects.get_for_model(type(obj)).pk,
        object_id=object_id,
        object_repr=str(obj)[:200],
        action_flag=flag,
        change_message=json.dumps(message) if isinstance(message, list) else message,
    )


def _crumbs(opts: Any, *tail: tuple[str, str]) -> dict[str, Any]:
    """Breadcrumbs Home > the app > ``tail`` (label, url; the current page has no url)."""
    return {
        "crumbs": [
            ("Home", reverse("admin:index")),
            (opts.app_config.verbose_name, reverse("admin:app_list", args=[opts.app_label])),
            *tail,
        ],
        "crumbs_as_list": django.VERSION >= (6, 0),
    }


def _with_query(request: HttpRequest, **changes: Any) -> str:
    """``?query`` of the current URL with some parameters set (or removed when None)."""
    params = request.GET.copy()
    for key, value in changes.items():
        params.pop(key, None)
        if value not in (None, ""):
            params[key] = value
    return "?" + params.urlencode() if params else "?"


def _preview(properties: dict[str, Any]) -> str:
    parts = []
    length = 0
    for name, value in properties.items():
        part = f"{name}: {jsonview.dumps_value(value)}"
        parts.append(part)
        length += len(part) + 3
        if length > PREVIEW_CHARS:
            break
    text = " · ".join(parts)
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _micros(value: dt.datetime) -> str:
    return Cursor(value, 0, 0).encode().split("_")[0]


class EntityBodyForm(forms.Form):
    """The body of an entity as JSON (:mod:`.jsonview`), plus when it was loaded."""

    body = forms.CharField(
        widget=forms.Textarea(attrs={"class": "schemaless-json", "spellcheck": "false"}),
        strip=False,
    )
    loaded = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, entity: Entity, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entity = entity
        text = self.data.get("body") if self.is_bound else self.initial.get("body")
        lines = (text or "").count("\n") + 1
        self.fields["body"].widget.attrs["rows"] = max(8, min(40, lines + 2))

    def clean_body(self) -> dict[str, Any]:
        try:
            properties = jsonview.loads(self.cleaned_data["body"])
        except jsonview.JSONViewError as exc:
            raise forms.ValidationError(str(exc)) from None
        if "id" in properties:
            try:
                same = keys.entity_id_bytes(properties.pop("id")) == bytes(self.entity.row_id)
            except InvalidEntityId:
                same = False
            if not same:
                raise forms.ValidationError(
                    "an entity's id cannot change: remove \"id\" or give the entity's own"
                )
        try:
            conf.get().codec.encode(properties)
        except SchemalessError as exc:  # a value the body cannot hold (e.g. an int over 2**64)
            raise forms.ValidationError(str(exc)) from None
        return properties

    def clean(self) -> dict[str, Any]:
        loaded = self.cleaned_data.get("loaded")
        if loaded and loaded != _micros(self.entity.row_updated):
            raise forms.ValidationError(
                "This entity was changed by someone else after you opened it. Copy your edit, "
                "reload the page, and apply it again."
            )
        return self.cleaned_data


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
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)
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
            messages.error(request, f"There is no shard {shard!r}; showing every shard.")
            shard = ""
        aliases = [shard] if shard else all_aliases
        size = self.list_per_page
        text = request.GET.get("q", "")
        context: dict[str, Any] = {"errors": [], "search_note": ""}
        entities: list[Entity] = []
        next_url = prev_url = first_url = ""
        try:
            search = parse_search(text)
        except SearchError as exc:
            context["errors"].append(str(exc))
            search = None
        if search is not None and search.by_id:
            try:
                found = Entity.objects.get_many([search.entity_id])
            except ShardUnavailable as exc:
                context["errors"].append(str(exc))
                found = {}
            entities = [e for e in found.values() if e.shard in aliases]
            home = shards.alias_for(search.entity_id)  # type: ignore[arg-type]
            if not found:
                context["search_note"] = f"No entity has this id (it would be on {home})."
            elif not entities:
                context["search_note"] = f"The entity is on {home}, outside the shard filter."
        elif search is not None and search.conditions:
            page_number = _page_number(request)
            try:
                entities, more, index_name = index_results(
                    search.conditions, aliases, (page_number - 1) * size, size
                )
            except (SchemalessError, ValueError, TypeError) as exc:
                context["errors"].append(f"Search failed: {exc}")
            else:
                context["search_note"] = f"Found through index {index_name}, in its order."
                if more:
                    next_url = _with_query(request, p=page_number + 1)
                if page_number > 1:
                    prev_url = _with_query(request, p=page_number - 1 if page_number > 2 else None)
                    first_url = _with_query(request, p=None)
        elif search is not None:
            after, before = _cursor(request, "after"), _cursor(request, "before")
            page = newest_page(aliases, size, after=after, before=before)
            entities = page.entities
            context["errors"].extend(f"Shard unavailable: {e}" for e in page.errors)
            if page.older:
                next_url = _with_query(request, after=page.older.encode(), before=None)
            if page.newer:
                prev_url = _with_query(request, before=page.newer.encode(), after=None)
            if after or before:
                first_url = _with_query(request, after=None, before=None)

        rows = [self._row(entity) for entity in entities]
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
                **_crumbs(self.opts, ("Entities", "")),
                "cl_rows": rows,
                "query": text,
                "shard": shard,
                "shard_choices": choices,
                "search_help_text": SEARCH_HELP,
                "next_url": next_url,
                "prev_url": prev_url,
                "first_url": first_url,
                "health_url": reverse("admin:schemaless_store_indexstate_changelist"),
                **(extra_context or {}),
            }
        )
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    def _row(self, entity: Entity) -> dict[str, Any]:
        try:
            preview, broken = _preview(entity.body_properties()), False
        except CorruptBody as exc:
            preview, broken = str(exc), True
        return {
            "id": str(entity.id),
            "url": entity_url(entity.id),
            "shard": entity.shard,
            "bucket": keys.bucket_of(bytes(entity.row_id), conf.get().buckets),
            "updated": entity.row_updated,
            "size": len(bytes(entity.row_body)),
            "preview": preview,
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
                initial={"body": body_json, "loaded": _micros(entity.row_updated)}, entity=entity
            )
        shown = body_json if len(body_json) <= EDIT_MAX_CHARS else body_json[:EDIT_MAX_CHARS]
        index_rows = health.entity_rows(entity)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Entity {entity.id}",
            "subtitle": None,
            "opts": self.opts,
            **_crumbs(self.opts, ("Entities", _changelist_url()), (str(entity.id), "")),
            "entity": entity,
            "entity_id": str(entity.id),
            "entity_hex": entity.id.hex,
            "shard": entity.shard,
            "bucket": keys.bucket_of(bytes(entity.row_id), conf.get().buckets),
            "body_size": len(bytes(entity.row_body)),
            "body_json": shown,
            "body_truncated": len(body_json) > EDIT_MAX_CHARS,
            "body_error": body_error,
            "form": form,
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
            return HttpResponseRedirect(request.path)
        changed = sorted(
            name
            for name in set(old) | set(new)
            if name not in old
            or name not in new
            or jsonview.dumps_value(old[name]) != jsonview.dumps_value(new[name])
        )
        # A fresh instance with the same id is an update of that entity through the write path:
        # the protocol locks the stored row and moves index rows from its old to its new values.
        edited = Entity(id=entity.id, **new)
        try:
            edited.save()
        except SchemalessError as exc:
            form.add_error("body", str(exc))
            return None
        _log(request, edited, str(edited.id), CHANGE, [{"changed": {"fields": changed}}])
        self.message_user(request, f"The entity {edited.id} was changed successfully.")
        if "_continue" in request.POST:
            return HttpResponseRedirect(request.path)
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
            _log(request, entity, str(entity.id), DELETION, "")
            self.message_user(request, f"The entity {entity.id} was deleted.")
            return HttpResponseRedirect(reverse("admin:schemaless_store_entity_changelist"))
        rows = health.entity_rows(entity)
        context = {
            **self.admin_site.each_context(request),
            "title": "Are you sure?",
            "subtitle": None,
            "opts": self.opts,
            **_crumbs(
                self.opts,
                ("Entities", _changelist_url()),
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
        except ConfigurationError as exc:
            history, off = [], f"Entity history is off: {exc}"
        views = [
            admin_versions.version_view(v.ref_key, v.created_at, lambda v=v: v.properties)
            for v in history
        ]
        bodies = {v.ref_key: (lambda v=v: v.properties) for v in history}
        crumbs = _crumbs(
            self.opts,
            ("Entities", _changelist_url()),
            (str(found.id), entity_url(found.id)),
            ("Versions", ""),
        )
        title = f"Versions of entity {found.id}"
        return _versions_page(self, request, title, crumbs, views, bodies, [], off)

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
                **_crumbs(
                    self.opts,
                    ("Entities", _changelist_url()),
                    (str(found.id), entity_url(found.id)),
                    ("History", ""),
                ),
                **(extra_context or {}),
            },
        )


def _versions_page(
    model_admin: admin.ModelAdmin,
    request: HttpRequest,
    title: str,
    crumbs: dict[str, Any],
    views: list[admin_versions.VersionView],
    bodies: dict[int, Any],
    keep: list[tuple[str, str]],
    off_message: str,
) -> HttpResponse:
    """The versions page (an entity's, or a cell column's): the list of ``views`` and, given
    ``?a=N&b=M`` (default: the latest two), those two versions compared (``bodies[n]()`` reads
    version ``n``'s properties). ``keep``: query parameters the compare form carries along."""
    known = [v.ref_key for v in views]
    a, a_problem = admin_versions.parse_version(request.GET.get("a"), known)
    b, b_problem = admin_versions.parse_version(request.GET.get("b"), known)
    problems = [p for p in (a_problem, b_problem) if p]
    changes = None
    if (a is None or b is None) and len(known) > 1 and not problems:
        a, b = known[-2], known[-1]  # by default: the latest against the one before
    if a is not None and b is not None:
        try:
            changes = admin_versions.compare(bodies[a](), bodies[b]())
        except CorruptBody as exc:
            problems.append(str(exc))
    context = {
        **model_admin.admin_site.each_context(request),
        "title": title,
        "subtitle": None,
        "opts": model_admin.opts,
        **crumbs,
        "off_message": off_message,
        "versions": views,
        "versions_newest_first": list(reversed(views)),
        "a": a,
        "b": b,
        "changes": changes,
        "problems": problems,
        "keep": keep,
    }
    request.current_app = model_admin.admin_site.name
    return TemplateResponse(request, "admin/schemaless_store/versions.html", context)


def _changelist_url() -> str:
    return reverse("admin:schemaless_store_entity_changelist")


def _page_number(request: HttpRequest) -> int:
    try:
        return max(1, int(request.GET.get("p", 1)))
    except ValueError:
        return 1


def _cursor(request: HttpRequest, name: str) -> Cursor | None:
    text = request.GET.get(name)
    if not text:
        return None
    try:
        return Cursor.decode(text)
    except ValueError:
        messages.error(request, "That page link is not valid any more; showing the first page.")
        return None


def _shard_url(request: HttpRequest, alias: str | None) -> str:
    # A new filter starts from the first page: a cursor belongs to the old filter's order.
    return _with_query(request, shard=alias, after=None, before=None, p=None)


# --- index health -----------------------------------------------------------------------------


def _health_url(index_name: str = "") -> str:
    """The health page, scrolled to an index's section (only for a name that can be one)."""
    url = reverse("admin:schemaless_store_indexstate_changelist")
    return f"{url}#index-{index_name}" if is_identifier(index_name) else url


@admin.register(IndexState)
class IndexStateAdmin(admin.ModelAdmin):
    """Its changelist is the index-health page; "check now" samples entities per shard."""

    change_list_template = "admin/schemaless_store/indexstate/health.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # states are recorded by migrateall and the cleaner

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        check = self.admin_site.admin_view(require_POST(self.check_view))
        return [
            path("check/", check, name="schemaless_store_indexstate_check"),
            *super().get_urls(),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        reports = health.report()
        aliases = list(shards.shard_aliases())
        entities = {
            alias: next(
                (s.entities for r in reports for s in r.shards if s.alias == alias),
                health.count_tables(alias, [health.ENTITIES_TABLE])[health.ENTITIES_TABLE],
            )
            for alias in aliases
        }
        context = {
            **self.admin_site.each_context(request),
            "title": "Index health",
            "subtitle": None,
            "opts": self.opts,
            **_crumbs(self.opts, ("Index health", "")),
            "reports": reports,
            "aliases": aliases,
            "entity_counts": [(alias, entities[alias]) for alias in aliases],
            "can_check": self.has_change_permission(request),
            "sample_default": health.DEFAULT_SAMPLE,
            "sample_max": health.MAX_SAMPLE,
            "exact_below": health.EXACT_COUNT_BELOW,
            "passes_url": reverse("admin:schemaless_store_cleanerpass_changelist"),
            "entities_url": reverse("admin:schemaless_store_entity_changelist"),
            "now": dt.datetime.now(dt.UTC),
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # An index's state is the cleaner's to change; its page is its section of the health page.
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(_health_url(unquote(object_id)))

    def check_view(self, request: HttpRequest) -> HttpResponse:
        """POST: sample entities on every shard and compare them with the indexes' rows."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        try:
            per_shard = int(request.POST.get("sample", health.DEFAULT_SAMPLE))
        except ValueError:
            per_shard = health.DEFAULT_SAMPLE
        per_shard = max(1, min(health.MAX_SAMPLE, per_shard))
        name = request.POST.get("index", "")
        results = health.check([name] if name else None, per_shard, random.Random())
        if name and not results:
            messages.error(request, f"No maintained index is called {name!r}.")
        states = {s.name: s for s in IndexState.objects.filter(name__in=[r.index for r in results])}
        for result in results:
            summary = result.summary(per_shard)
            state = states.get(result.index)
            if state is not None:
                _log(request, state, state.pk, CHANGE, summary)
            messages.add_message(
                request, messages.SUCCESS if result.ok else messages.ERROR, summary
            )
        return HttpResponseRedirect(_health_url(name))


class ReadOnlyAdmin(admin.ModelAdmin):
    """Nothing can be added, changed or deleted: a record or an immutable store."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(CleanerPass)
class CleanerPassAdmin(ReadOnlyAdmin):
    """Every recorded cleaner pass, read-only (the cleaner writes them)."""

    list_display = (
        "index_name",
        "shard",
        "kind",
        "status",
        "started",
        "finished",
        "entities_scanned",
        "rows_inserted",
        "stale_removed",
        "orphans_removed",
        "errors",
    )
    list_filter = ("index_name", "shard", "kind", "status")
    # No date_hierarchy: on MySQL it needs the server's time zone tables, often not loaded.


@admin.register(Cell)
class CellAdmin(ReadOnlyAdmin):
    """The cell store, read-only: a row's columns (latest version of each), a column's versions,
    and two versions compared. Cells are immutable: nothing can be added, changed or deleted."""

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("", wrap(self.changelist_view), name="schemaless_store_cell_changelist"),
            path("versions/", wrap(self.versions_view), name="schemaless_store_cell_versions"),
        ]

    def _row_key(self, request: HttpRequest) -> tuple[bytes | None, str]:
        text = request.GET.get("row", "").strip()
        if not text:
            return None, ""
        try:
            return keys.entity_id_bytes(text), ""
        except (InvalidEntityId, ValueError, TypeError) as exc:
            return None, f"{text!r} is not a row key: {exc}"

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        key, error = self._row_key(request)
        columns = []
        if key is not None:
            try:
                latest = Cell.objects.row(key)
            except ShardUnavailable as exc:
                error, latest = str(exc), {}
            for cell in latest.values():
                url = (
                    reverse("admin:schemaless_store_cell_versions")
                    + "?"
                    + urlencode({"row": str(cell.row_key), "column": cell.column_name})
                )
                columns.append((cell, url))
        context = {
            **self.admin_site.each_context(request),
            "title": "Cells of a row",
            "subtitle": None,
            "opts": self.opts,
            **_crumbs(self.opts, ("Cells", "")),
            "row_text": request.GET.get("row", ""),
            "row_key": None if key is None else str(uuid.UUID(bytes=key)),
            "shard": None if key is None else shards.alias_for(key),
            "columns": columns,
            "error": error,
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/schemaless_store/cell/row.html", context)

    def versions_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        key, error = self._row_key(request)
        column = request.GET.get("column", "")
        rows_url = reverse("admin:schemaless_store_cell_changelist")
        if key is None or not column:
            messages.error(request, error or "give a row key and a column")
            return HttpResponseRedirect(rows_url)
        try:
            cells = Cell.objects.versions(key, column)
        except (InvalidCell, ShardUnavailable) as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(rows_url)
        views = [
            admin_versions.version_view(c.ref_key, c.created_at, lambda c=c: c.body) for c in cells
        ]
        bodies = {c.ref_key: (lambda c=c: c.body) for c in cells}
        row_text = str(uuid.UUID(bytes=key))
        crumbs = _crumbs(
            self.opts,
            ("Cells", rows_url),
            (row_text, rows_url + "?" + urlencode({"row": row_text})),
            (column, ""),
        )
        title = f"Versions of column {column!r} of row {row_text}"
        keep = [("row", row_text), ("column", column)]
        return _versions_page(self, request, title, crumbs, views, bodies, keep, "")
