"""Forms of the feed: ``ModelForm``s of its kinds (:mod:`.models`), whose fields and validation
come from the kinds' fields. Lengths stay well inside the store's 255-byte index columns."""

from __future__ import annotations

from django import forms

from .models import Comment, Entry, User


class SignUpForm(forms.ModelForm):
    class Meta:
        model = User
        fields = ["username", "email", "name"]

    def clean_username(self) -> str:
        return self.cleaned_data["username"].lower()

    def clean_email(self) -> str:
        return self.cleaned_data["email"].lower()


class ActAsForm(forms.Form):
    username = forms.CharField(max_length=30)


class EntryForm(forms.ModelForm):
    # The kind's URLField, with "example.com" read as https (the model's validators still run).
    link = forms.URLField(
        max_length=200,
        assume_scheme="https",
        error_messages={
            "required": "Give the link the entry shares.",
            "invalid": "Enter a whole web address, such as https://example.com/.",
        },
    )

    class Meta:
        model = Entry
        fields = ["title", "link"]
        # Each message names its field: shown together, "This field is required." twice did not.
        error_messages = {"title": {"required": "Give the entry a title."}}


class CommentForm(forms.ModelForm):
    class Meta:
        model = Comment
        fields = ["body"]
        widgets = {"body": forms.Textarea(attrs={"rows": 2})}
        labels = {"body": "Comment"}
