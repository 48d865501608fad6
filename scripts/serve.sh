#!/usr/bin/env bash
# Serve the demo as production does (docs/deployment.md): gunicorn with sync workers (WSGI), or
# uvicorn's workers (ASGI, for the async views) with SERVER=asgi; static files from WhiteNoise
# after collectstatic; project.production's settings (SECRET_KEY and ALLOWED_HOSTS from the
# environment). Migrations and seed data are scripts/demo.sh's (DEMO_SERVER=gunicorn runs this
# after them); this script only serves.
#   SECRET_KEY=... ALLOWED_HOSTS=example.com bash scripts/serve.sh
#   WEB_CONCURRENCY=4 BIND=127.0.0.1:8000 SERVER=asgi bash scripts/serve.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export DJANGO_SETTINGS_MODULE=${DJANGO_SETTINGS_MODULE:-project.production}
py=${PYTHON:-.venv/bin/python}
$py manage.py collectstatic --noinput -v 0
if [ "${SERVER:-wsgi}" = asgi ]; then
  exec $py -m gunicorn -c project/gunicorn.conf.py -k uvicorn.workers.UvicornWorker project.asgi:application
fi
exec $py -m gunicorn -c project/gunicorn.conf.py project.wsgi:application
