"""An entity's body in the admin: the form that edits it as JSON
(:mod:`schemaless_store.values.jsonview`)."""

from __future__ import annotations

from typing import Any

from django import forms

from ..config import conf
from ..exceptions import InvalidEntityId, SchemalessError
from ..models.entity import Entity
from ..values import entity_ids, expected, jsonview

# Larger bodies are shown truncated and cannot be edited here: a browser chokes on a textarea
# of many megabytes, and Django refuses such a POST (DATA_UPLOAD_MAX_MEMORY_SIZE) anyway.
EDIT_MAX_CHARS = 1_000_000


CHANGED_MEANWHILE = (
    "This entity was changed by someone else after you opened it. Copy your edit, reload the "
    "page, and apply it again."
)


def loaded_version(entity: Entity) -> str:
    """The stored state the form was loaded from (:func:`..values.expected.token`): the save checks,
    under the row lock, that it is still the stored one (a move of its bucket, which gives the
    row a new ``added_id`` but keeps its body and ``updated``, is no change)."""
    return expected.token(bytes(entity.row_body), entity.added_id, entity.row_updated)


class EntityBodyForm(forms.Form):
    """The body of an entity as JSON (:mod:`..values.jsonview`), plus when it was loaded."""

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
                same = entity_ids.entity_id_bytes(properties.pop("id")) == bytes(self.entity.row_id)
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

    def expectation(self) -> expected.Expected:
        """What the save expects stored: the state the page was loaded from (or, for a form
        posted without it, the one this request read)."""
        loaded = self.cleaned_data.get("loaded")
        if loaded:
            return expected.Expected(exists=True, token=loaded)
        return expected.of(self.entity)
