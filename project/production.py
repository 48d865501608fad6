"""The demo project's production settings: ``DJANGO_SETTINGS_MODULE=project.production``
(scripts/serve.sh, docker-compose.yml; docs/deployment.md). Everything of ``project.settings``,
and:

- ``SECRET_KEY`` and ``ALLOWED_HOSTS`` must come from the environment (no demo default);
- persistent connections with health checks (``CONN_MAX_AGE``/``CONN_HEALTH_CHECKS``, below);
- static files compressed and fingerprinted by WhiteNoise (run ``collectstatic`` first);
- HTTPS behind a proxy that terminates TLS and sets ``X-Forwarded-Proto``, with secure cookies
  and HSTS: ``manage.py check --deploy`` is clean. ``DJANGO_PLAIN_HTTP=1`` serves plain HTTP
  instead (docker-compose on a laptop, the load test on 127.0.0.1); ``check --deploy`` then
  warns, as it should.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from .settings import *  # noqa: F403
from .settings import DATABASES, env

DEBUG = False
SECRET_KEY = env("SECRET_KEY", default="")
if len(SECRET_KEY) < 50 or SECRET_KEY.startswith("insecure-"):
    raise ImproperlyConfigured(
        "project.production needs SECRET_KEY in the environment: 50 or more random characters "
        '(python -c "import secrets; print(secrets.token_urlsafe(50))")'
    )
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("project.production needs ALLOWED_HOSTS (comma-separated)")

# Persistent connections. A worker serves requests one after another; connecting costs a round
# trip and an authentication (~1 ms on a LAN, more over TLS) that a page of 3-6 statements would
# otherwise pay on every request, per shard. 60 s keeps them across requests while bounding how
# long a worker holds an idle session (max_connections: workers x shards x threads). Health
# checks ping a reused connection once per request before its first query, so a connection a
# server restart or wait_timeout ended is replaced instead of failing the request. A move's
# fence ends these sessions too: the store retries what it was doing on a fresh one (reads
# within MOVE_WAIT, writes LOST_ATTEMPTS times), so no value of CONN_MAX_AGE shows it to users.
CONN_MAX_AGE = env.int("CONN_MAX_AGE", default=60)
for _alias in DATABASES:
    DATABASES[_alias]["CONN_MAX_AGE"] = CONN_MAX_AGE
    DATABASES[_alias]["CONN_HEALTH_CHECKS"] = True

STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

_https = not env.bool("DJANGO_PLAIN_HTTP", default=False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = _https
SESSION_COOKIE_SECURE = _https
CSRF_COOKIE_SECURE = _https
SECURE_HSTS_SECONDS = 31_536_000 if _https else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = _https
SECURE_HSTS_PRELOAD = _https
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
