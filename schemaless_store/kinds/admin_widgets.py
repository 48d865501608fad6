"""A reference's widget in a kind's admin (``ReferenceField``): Django's raw-id widget, the id
in a text box with the lookup link (the referenced kind's list, opened as a popup whose rows
choose the id) and the referenced entity named beside it, linked to its page."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django import forms
from django.urls import NoReverseMatch, reverse
from django.utils.text import Truncator

from ..exceptions import InvalidEntityId


def change_url(admin_site: Any, entity: Any) -> str:
    """The admin page of an entity of a kind, or "" if its kind has no admin here."""
    opts = entity._meta
    try:
        return reverse(
            f"{admin_site.name}:{opts.app_label}_{opts.model_name}_change", args=[entity.id]
        )
    except NoReverseMatch:
        return ""


class ReferenceIdWidget(forms.TextInput):
    """The raw-id widget of a reference (see the module docs)."""

    template_name = "admin/widgets/foreign_key_raw_id.html"

    def __init__(self, target: Any, admin_site: Any, attrs: dict[str, Any] | None = None) -> None:
        self.target = target
        self.admin_site = admin_site
        super().__init__(attrs)

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        opts = self.target._meta
        context["related_url"] = None
        context["link_label"] = None
        if self.admin_site.is_registered(self.target):
            changelist = reverse(
                f"admin:{opts.app_label}_{opts.model_name}_changelist",
                current_app=self.admin_site.name,
            )
            context["related_url"] = f"{changelist}?{urlencode({'_to_field': 'id'})}"
            context["link_title"] = "Lookup"
            context["widget"]["attrs"].setdefault("class", "vForeignKeyRawIdAdminField vUUIDField")
        if context["widget"]["value"]:
            try:
                found = self.target.objects.get_many([str(context["widget"]["value"])])
            except (InvalidEntityId, ValueError):
                found = {}
            for entity in found.values():
                context["link_label"] = Truncator(str(entity)).words(14)
                context["link_url"] = change_url(self.admin_site, entity)
        return context
