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
    actions = ["out_of_print"]

    @admin.action(description="Mark as out of print")
    def out_of_print(self, request, queryset) -> None:
        count = queryset.update(in_print=False)
        self.message_user(request, f"{count} marked out of print.")

    @admin.display(description="Stars")
    def stars_shown(self, novel: Novel) -> str:
        return "*" * int(novel.stars)


@admin.register(Critique)
class CritiqueAdmin(KindAdmin):
    list_display = ["text", "novel"]
