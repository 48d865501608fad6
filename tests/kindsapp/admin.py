from django.contrib import admin

from schemaless_store.kinds.admin import KindAdmin

from .models import Note, Tag

admin.site.register(Note, KindAdmin)
admin.site.register(Tag, KindAdmin)
