from django.apps import AppConfig


class FeedConfig(AppConfig):
    name = "project.feed"
    label = "feed"
    default_auto_field = "django.db.models.BigAutoField"
