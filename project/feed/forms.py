"""Forms of the feed. Lengths stay well inside the store's 255-byte index columns."""

from __future__ import annotations

from django import forms


class SignUpForm(forms.Form):
    username = forms.RegexField(
        regex=r"^[A-Za-z0-9_]{2,30}$",
        max_length=30,
        help_text="2 to 30 letters, digits or underscores.",
        error_messages={"invalid": "Use 2 to 30 letters, digits or underscores."},
    )
    email = forms.EmailField(max_length=200)
    name = forms.CharField(max_length=80, required=False, help_text="Shown next to your entries.")

    def clean_username(self) -> str:
        return self.cleaned_data["username"].lower()

    def clean_email(self) -> str:
        return self.cleaned_data["email"].lower()


class ActAsForm(forms.Form):
    username = forms.CharField(max_length=30)


class EntryForm(forms.Form):
    # Each message names its field: shown together, "This field is required." twice did not.
    title = forms.CharField(max_length=200, error_messages={"required": "Give the entry a title."})
    link = forms.URLField(
        max_length=200,
        assume_scheme="https",
        error_messages={
            "required": "Give the link the entry shares.",
            "invalid": "Enter a whole web address, such as https://example.com/.",
        },
    )


class CommentForm(forms.Form):
    body = forms.CharField(
        max_length=1000, widget=forms.Textarea(attrs={"rows": 2}), label="Comment"
    )
