"""``admin.site.register(Entry, KindAdmin)``: a kind's own admin (docs/kinds.md#the-admin).

A kind's entities live on many shards, so the list is served by the kind's indexes, with
Django's options and parameters (``list_display``, ``list_filter``, ``search_fields``,
``ordering``, ``?o=``, ``?p=``, actions): :mod:`.changelist` decides what it lists,
:mod:`.listpage` draws it, :mod:`.admin_actions` runs the actions, :mod:`.admin_checks` refuses
at ``manage.py check`` what no index serves. The add, change, delete and history pages are
Django's own: the form is a ``ModelForm`` of the kind, addressed by the entity's id, saved
through ``save()`` with the token of the page it was loaded from, so an edit made meanwhile by
someone else is refused, not overwritten; a reference is edited in a raw-id widget
(:mod:`.admin_widgets`). A write refused after the form was valid (someone wrote between the
form's check and the write, a unique index holds the value, an index cannot hold it) shows the
same form again with the refusal as its error, as Django's own failed validation does; nothing
is written.
The operators' raw entity view (``EntityAdmin``) stays, linked from each page.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from ..admin.common import entity_url, with_query
from ..admin.entity_form import CHANGED_MEANWHILE
from ..exceptions import (
    Conflict,
    IndexValueError,
    InvalidEntityError,
    InvalidEntityId,
    SchemalessError,
    UniqueViolation,
)
from ..values import expected
from .admin_actions import delete_selected, run_action
from .admin_checks import KindAdminChecks
from .admin_widgets import ReferenceIdWidget
from .changelist import ORDER_VAR, PAGE_VAR, POPUP_VAR, SEARCH_VAR, KindList
from .fit import index_error
from .listpage import ACTION_CHECKBOX, filters, headers, rows
from .references import ReferenceField

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
    checks_class = KindAdminChecks

    def declared(self) -> list[str]:
        return list(self.model._kind.fields)

    def get_list_display(self, request: HttpRequest) -> Any:
        if self.list_display != ("__str__",):
            return self.list_display
        return ["id", *self.declared()[:6]]

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        """Django's form fields; a reference is edited by id in the raw-id widget."""
        if isinstance(db_field, ReferenceField):
            kwargs["widget"] = ReferenceIdWidget(db_field.target(), self.admin_site)
            return db_field.formfield(**kwargs)
        return super().formfield_for_dbfield(db_field, request, **kwargs)

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
        except (Conflict, UniqueViolation, IndexValueError, InvalidEntityError) as exc:
            # Refused by the write after the form was valid: nothing was written (Django's
            # transaction around the view is rolled back too, its log entry with it). The same
            # form again, bound to what was posted, with the refusal as its error.
            setattr(request, REFUSED, self.refusal(exc))
            return super().changeform_view(request, object_id, form_url, context)

    def refusal(self, exc: SchemalessError) -> ValidationError:
        """The form error for a write's refusal (by field where it names one)."""
        if isinstance(exc, Conflict):
            return ValidationError(CHANGED_MEANWHILE)
        if isinstance(exc, UniqueViolation):
            return self.model.unique_error(exc)
        if isinstance(exc, IndexValueError):
            return index_error(self.model, exc)
        return ValidationError(f"The store refused this {self.model._meta.verbose_name}: {exc}")

    def get_view_on_site_url(self, obj: Any = None) -> str | None:
        """The instance's own page (``get_absolute_url()``), linked directly: Django's
        redirect through the content type would read the entity with a plain queryset."""
        if obj is None or not self.view_on_site:
            return None
        if callable(self.view_on_site):
            return str(self.view_on_site(obj))
        if hasattr(obj, "get_absolute_url"):
            return str(obj.get_absolute_url())
        return None

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        """Django's actions, with "Delete selected" deleting through the store.
        ``action_location`` is Django 6.1's (the list or the change page); 5.2 has none."""
        if action_location is None:
            found = super().get_actions(request)
        else:
            found = super().get_actions(request, action_location)  # type: ignore[call-arg]
        if "delete_selected" in found and self.has_delete_permission(request):
            found["delete_selected"] = self.get_action(delete_selected)
        return found

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        queryset.delete()  # the kind's queryset: each entity deleted through the store

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if not self.has_change_permission(request) and not self.has_delete_permission(request):
                raise PermissionDenied
            response = run_action(self, request)
            if response is not None:
                return response
        popup = POPUP_VAR in request.GET
        actions = {} if popup else self.get_actions(request)
        list_display = list(self.get_list_display(request))
        columns = list(list_display)
        if actions:
            list_display = [ACTION_CHECKBOX, *list_display]
        kind_list = KindList(self, request, list_display)
        listing = kind_list.run()
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "opts": opts,
            "title": opts.verbose_name_plural.capitalize(),
            "headers": headers(kind_list, listing, columns),
            "rows": rows(kind_list, listing, columns),
            "filters": filters(kind_list),
            "listing": listing,
            "query": kind_list.term,
            "search_var": SEARCH_VAR,
            "has_filters": any(k not in (SEARCH_VAR, PAGE_VAR, ORDER_VAR) for k in request.GET),
            "search_help_text": self.get_search_help(request),
            "has_add_permission": self.has_add_permission(request),
            "actions": bool(actions),
            "action_choices": self.get_action_choices(request) if actions else [],
            "page": kind_list.page,
            "next_url": (
                with_query(request, **{PAGE_VAR: kind_list.page + 1}) if listing.has_next else ""
            ),
            "previous_url": self.previous_url(request, kind_list.page),
            "media": self.media,
            "is_popup": popup,
            "popup_params": {
                k: request.GET[k] for k in (POPUP_VAR, "_to_field") if k in request.GET
            },
            **(extra_context or {}),
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, self.change_list_template, context)

    @staticmethod
    def previous_url(request: HttpRequest, page: int) -> str:
        if page <= 1:
            return ""
        return with_query(request, **{PAGE_VAR: page - 1 if page > 2 else None})

    def get_search_help(self, request: HttpRequest) -> str:
        if self.search_help_text != SEARCH_HELP:
            return str(self.search_help_text)
        fields = self.get_search_fields(request)
        if not fields:
            return SEARCH_HELP
        shown = ", ".join(f"{f[1:]} (starts with)" if f.startswith("^") else f[1:] for f in fields)
        return f"An id, or a value of: {shown}."

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {**(extra_context or {}), "entity_history_url": entity_url(object_id, "history")}
        return super().history_view(request, object_id, context)
