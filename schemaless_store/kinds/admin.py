"""``admin.site.register(Entry, KindAdmin)``: a kind's own admin (docs/kinds.md#the-admin).

A kind's entities live on many shards, so the list is the store's: ``Entry.objects.all()``
paged by signed cursor, or a search through the kind's indexes (``user_id=...``, or an id).
The add, change, delete and history pages are Django's own: the form is a ``ModelForm`` of the
kind, addressed by the entity's id, saved through ``save()`` (validated) with the token of the
page it was loaded from, so an edit made meanwhile by someone else is refused, not overwritten.
A write refused after the form was valid (someone wrote between the form's check and the write,
or a unique index holds a value) shows the same form again with the refusal as its error, as
Django's own failed validation does; nothing is written.
The operators' raw entity view (``EntityAdmin``) stays, linked from each page.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from ..admin.common import entity_url, with_query
from ..admin.entity_form import CHANGED_MEANWHILE
from ..exceptions import (
    Conflict,
    InvalidCursor,
    InvalidEntityId,
    SchemalessError,
    UniqueViolation,
)
from ..values import entity_ids, expected

SEARCH_HELP = (
    "An id, or property=value conditions joined by ' & ' that one of the kind's indexes "
    "serves (e.g. user_id=...)."
)
# Where a write's refusal waits, on the request, for the form that is shown again.
REFUSED = "_kind_admin_refused"


class KindAdmin(admin.ModelAdmin):
    """The admin of one kind: see the module docs."""

    list_per_page = 50
    change_list_template = "admin/schemaless_store/kind/change_list.html"
    change_form_template = "admin/schemaless_store/kind/change_form.html"
    search_help_text = SEARCH_HELP

    def declared(self) -> list[str]:
        return list(self.model._kind.fields)

    def get_list_display(self, request: HttpRequest) -> Any:
        if self.list_display != ("__str__",):
            return self.list_display
        return ["id", *self.declared()[:6]]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [*(self.fields or self.declared()), "loaded"]

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        try:
            return self.model.objects.get(id=object_id)
        except (self.model.DoesNotExist, InvalidEntityId):
            return None

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        token = "" if obj is None else expected.token(bytes(obj.row_body), obj.added_id)
        refused: ValidationError | None = getattr(request, REFUSED, None)

        class TokenForm(kwargs.pop("form", self.form)):  # type: ignore[misc]
            # The stored state this page was loaded from: the save requires it still stored.
            loaded = forms.CharField(widget=forms.HiddenInput, required=False, initial=token)

            def clean(self) -> Any:
                cleaned = super().clean()
                if refused is not None:  # the write refused this very form (changeform_view)
                    for field, errors in getattr(refused, "error_dict", {None: [refused]}).items():
                        self.add_error(field if field in self.fields else None, errors)
                # Told here, beside the form; the write checks it again under the row lock.
                elif obj is not None and cleaned.get("loaded") and cleaned["loaded"] != token:
                    raise forms.ValidationError(CHANGED_MEANWHILE)
                return cleaned

        return super().get_form(request, obj, change=change, form=TokenForm, **kwargs)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        loaded = form.cleaned_data.get("loaded")
        expect = expected.Expected(exists=True, token=loaded) if change and loaded else None
        obj.save(validate=False, expect=expect)

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        if object_id is not None:
            obj = self.get_object(request, object_id)
            if obj is not None:
                context["entity_url"] = entity_url(obj.id)
                context["entity_history_url"] = entity_url(obj.id, "history")
                if request.method == "GET":
                    for field, problems in obj.kind_errors().items():
                        messages.warning(
                            request,
                            f"The stored {field} does not fit the field: {' '.join(problems)}",
                        )
        try:
            return super().changeform_view(request, object_id, form_url, context)
        except (Conflict, UniqueViolation) as exc:
            # Refused by the write after the form was valid: nothing was written (Django's
            # transaction around the view is rolled back too, its log entry with it). The same
            # form again, bound to what was posted, with the refusal as its error.
            setattr(request, REFUSED, self.refusal(exc))
            return super().changeform_view(request, object_id, form_url, context)

    def refusal(self, exc: Conflict | UniqueViolation) -> ValidationError:
        """The form error for a write's refusal (by field where it names one)."""
        if isinstance(exc, Conflict):
            return ValidationError(CHANGED_MEANWHILE)
        return self.model.unique_error(exc)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        text = request.GET.get("q", "").strip()
        after = request.GET.get("after") or None
        errors: list[str] = []
        entities: list[Any] = []
        next_cursor = None
        try:
            if text:
                query = self.search(text)
                if isinstance(query, list):
                    entities = query
                else:
                    page = query.page(after=after, size=self.list_per_page)
                    entities, next_cursor = page.entities, page.next_cursor
            else:
                page = self.model.objects.all().page(after=after, size=self.list_per_page)
                entities, next_cursor = page.entities, page.next_cursor
        except InvalidCursor:
            errors.append("That page link is no longer valid; showing the first page.")
        except (SchemalessError, ValidationError, ValueError) as exc:
            errors.append(str(exc))
        columns = [c for c in self.get_list_display(request) if isinstance(c, str)]
        opts = self.model._meta
        rows = [
            {
                "url": reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[e.id]),
                "cells": [e.id if c == "id" else getattr(e, c, "") for c in columns],
            }
            for e in entities
        ]
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "title": opts.verbose_name_plural.capitalize(),
            "columns": [c if c == "id" else opts.get_field(c).verbose_name for c in columns],
            "rows": rows,
            "query": text,
            "errors": errors,
            "search_help_text": self.search_help_text,
            "has_add_permission": self.has_add_permission(request),
            "next_url": with_query(request, after=next_cursor) if next_cursor else "",
            "first_url": with_query(request, after=None) if after else "",
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    def search(self, text: str) -> Any:
        """An id: that entity (a list); else ``a=b & c=d``: the kind's index query, each
        value converted by its field (``ValueError``/``ValidationError`` if it does not fit)."""
        try:
            key = entity_ids.entity_id_bytes(text)
        except InvalidEntityId:
            pass
        else:
            found = self.model.objects.get_many([key])
            return list(found.values())
        conditions: dict[str, Any] = {}
        for part in text.split("&"):
            name, sep, value = part.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not name:
                raise ValueError(f"{part.strip()!r} is not property=value")
            field_name = name.split("__", 1)[0]
            model_field = self.model._kind.fields.get(field_name)
            if model_field is None:
                raise ValueError(f"{self.model.__name__} has no field {field_name!r}")
            conditions[name] = model_field.to_python(value)
        return self.model.objects.filter_index(**conditions)

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "entity_history_url": entity_url(object_id, "history")}
        return super().history_view(request, object_id, context)
