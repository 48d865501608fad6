"""The operators' docs name things as the code does (no database needed)."""

from __future__ import annotations

import re
from pathlib import Path

from django.apps import apps
from django.contrib import admin
from django.utils.text import capfirst

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_admin_md_names_each_admin_page_as_the_admin_index_does():
    text = (DOCS / "admin.md").read_text()
    rows = re.findall(r"^\| ([^|]+?) \| `/admin/schemaless_store/(\w+)/` \|", text, re.M)
    # Every page the admin registers is in the table (Cells was missing once).
    registered = {
        model._meta.model_name
        for model in apps.get_app_config("schemaless_store").get_models()
        if admin.site.is_registered(model)
    }
    assert registered >= {"entity", "indexstate", "cleanerpass", "cell"}
    assert {model_name for _shown, model_name in rows} >= registered
    count = re.search(r"registers (\w+) admin pages", text)
    assert count and count.group(1) == ["zero", "one", "two", "three", "four", "five"][len(rows)]
    for shown, model_name in rows:
        model = apps.get_model("schemaless_store", model_name)
        assert shown == capfirst(model._meta.verbose_name_plural)
    assert "[sic]" not in text and "passs" not in text
