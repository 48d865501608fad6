from django.contrib import admin

from schemaless_store.kinds.admin import KindAdmin

from .models import Critique, Novel


@admin.display(description="Loud title")
def loud(novel: Novel) -> str:
    return str(novel.title).upper()


@admin.register(Novel)
class NovelAdmin(KindAdmin):
    list_display = ["title", "genre", "in_print", "published", loud, "shout", "stars_shown"]
    list_filter = ["genre", "in_print"]
    search_fields = ["=isbn", "^title"]
    ordering = ["-published"]
    list_per_page = 3

    @admin.display(description="Stars")
    def stars_shown(self, novel: Novel) -> str:
        return "*" * int(novel.stars)


@admin.register(Critique)
class CritiqueAdmin(KindAdmin):
    list_display = ["text", "novel"]
