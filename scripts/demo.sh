#!/usr/bin/env bash
# The demo feed site in one command: virtualenv, migrations on every database, an admin user
# (admin / admin), seed data if the store has none, then the server.
#   bash scripts/demo.sh                          # embedded default: SQLite shards in ./var
#   PORT=8001 bash scripts/demo.sh                # another port
#   HOST=0.0.0.0 bash scripts/demo.sh             # listen on every interface (docker-compose.yml)
#   FEED_LIVE_INDEXES=link bash scripts/demo.sh   # declare the live index (docs/demo.md)
#   DJANGO_DEBUG=1 bash scripts/demo.sh           # Django's DEBUG pages (off by default)
#   DEMO_SERVER=gunicorn bash scripts/demo.sh     # serve with gunicorn as production does
#                                                 # (scripts/serve.sh; docker-compose.yml)
#   PYTHON=/opt/venv/bin/python bash scripts/demo.sh   # an installed environment, no .venv
# With DATABASE_URL and SHARD_DATABASE_URLS set, the same site runs on MariaDB servers (10.11+).
# SCHEMALESS_DATA_DIR moves the SQLite files; DEMO_SEED_ARGS replaces the seed's arguments.
set -euo pipefail
cd "$(dirname "$0")/.."
# This script runs the demo project, whatever settings module the calling shell has exported.
export DJANGO_SETTINGS_MODULE=project.settings
# PYTHON: an interpreter that has the requirements already (the production image's, Dockerfile);
# without it, scripts/setup.sh makes .venv.
if [ -n "${PYTHON:-}" ]; then
  py=$PYTHON
else
  scripts/setup.sh .venv python3
  py=.venv/bin/python
fi
host=${HOST:-127.0.0.1}
port=${PORT:-8000}

$py manage.py migrateall
if ! $py manage.py shell -c "from django.contrib.auth.models import User; raise SystemExit(0 if User.objects.filter(username='admin').exists() else 1)" >/dev/null 2>&1; then
  DJANGO_SUPERUSER_PASSWORD=${DJANGO_SUPERUSER_PASSWORD:-admin} \
    $py manage.py createsuperuser --noinput --username admin --email admin@example.com
  echo "demo: created the admin user 'admin' (password: ${DJANGO_SUPERUSER_PASSWORD:-admin})"
fi
# --if-empty: running the demo again does not pile up data. Word splitting of the override is
# intended (DEMO_SEED_ARGS="--users 5 --entries 50").
# shellcheck disable=SC2086
$py manage.py seed --if-empty ${DEMO_SEED_ARGS:-}

shown=$host
if [ "$host" = 0.0.0.0 ]; then shown=127.0.0.1; fi
echo "demo: open http://$shown:$port/ (admin at /admin/, user admin / ${DJANGO_SUPERUSER_PASSWORD:-admin})"
if [ "${DEMO_SERVER:-runserver}" = gunicorn ]; then
  BIND="$host:$port" DJANGO_SETTINGS_MODULE=project.production exec bash scripts/serve.sh
fi
# DEBUG is off unless DJANGO_DEBUG=1 (project/settings.py); --insecure has runserver serve the
# static files (the admin's CSS and JavaScript) all the same. A development server, as ever.
exec $py manage.py runserver "$host:$port" --noreload --insecure
