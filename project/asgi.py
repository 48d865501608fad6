"""The demo as an ASGI application, for uvicorn's workers under gunicorn (scripts/serve.sh with
``SERVER=asgi``): the async views (``project/feed/api.py``) run on the event loop, the others in
Django's thread for sync code."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.production")
application = get_asgi_application()
