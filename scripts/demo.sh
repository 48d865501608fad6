#!/usr/bin/env bash
# Set up and run the demo site on the embedded default (SQLite shards in ./var):
# virtualenv, migrations on every database, an admin user (admin / admin), then the server.
#   scripts/demo.sh            # serves on 127.0.0.1:8000
#   PORT=8001 scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh .venv python3
py=.venv/bin/python
$py manage.py migrateall
if ! $py manage.py shell -c "from django.contrib.auth.models import User; raise SystemExit(0 if User.objects.filter(username='admin').exists() else 1)" 2>/dev/null; then
  DJANGO_SUPERUSER_PASSWORD=${DJANGO_SUPERUSER_PASSWORD:-admin} \
    $py manage.py createsuperuser --noinput --username admin --email admin@example.com
  echo "demo: created the admin user 'admin' (password: ${DJANGO_SUPERUSER_PASSWORD:-admin})"
fi
echo "demo: open http://127.0.0.1:${PORT:-8000}/ (admin at /admin/)"
exec $py manage.py runserver "127.0.0.1:${PORT:-8000}" --noreload
