#!/usr/bin/env bash
# Create (or refresh) a virtualenv with the project's requirements.
#   scripts/setup.sh [VENV_DIR] [PYTHON] [DJANGO_REQUIREMENT]
# Defaults: .venv, python3, the Django 5.2 LTS pinned in requirements.txt.
# mysqlclient compiles against MariaDB's client headers: on a machine without them, this installs
# Debian's libmariadb-dev and pkg-config (as root), or says what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${1:-.venv}
python=${2:-python3}
django=${3:-}

if ! pkg-config --exists libmariadb 2>/dev/null && ! pkg-config --exists mysqlclient 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing MariaDB client headers for mysqlclient (apt-get)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libmariadb-dev pkg-config >/dev/null
  else
    echo "setup: mysqlclient needs MariaDB/MySQL client headers: install libmariadb-dev and pkg-config" >&2
    exit 1
  fi
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv with $("$python" --version 2>&1)"
  "$python" -m venv "$venv"
fi

stamp="$venv/.requirements-stamp"
want="$(cat requirements.txt requirements-dev.txt; echo "django=$django")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing requirements into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  if [ -n "$django" ]; then
    # Another Django than the pinned LTS: every requirement but Django's pin, plus that Django.
    reqs=$(mktemp)
    { grep -v -i '^django[<>=~ ]' requirements.txt; grep -v '^-r ' requirements-dev.txt; } > "$reqs"
    "$venv/bin/python" -m pip install -q -r "$reqs" "$django"
    rm -f "$reqs"
  else
    "$venv/bin/python" -m pip install -q -r requirements-dev.txt
  fi
  printf '%s' "$want" > "$stamp"
fi
