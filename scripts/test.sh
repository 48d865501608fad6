#!/usr/bin/env bash
# The whole test suite, from a fresh machine: lint and types, then the suite on SQLite and on two real
# MariaDB servers (started by the tests), with Django 5.2 LTS on this machine's python3.
# With CI=true (or SCHEMALESS_DJANGO_MATRIX=all) the suite also runs on Django 6.1 with
# Python 3.12 (pyenv's), without the slow groups (-m slow), which run once, on 5.2. The SQLite and
# MariaDB passes of one Django version run side by side. In CI a MariaDB that cannot start fails the run; elsewhere a machine
# without mariadbd skips that part and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONDONTWRITEBYTECODE=1

results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

scripts/setup.sh .venv python3
# The load group (locust) for the CI load job, tests/serving/test_load.py: slow and MariaDB-only,
# so it runs once, in the MariaDB pass on Django 5.2 (about 30 s of load, 1.5 min in all).
.venv/bin/python -m pip install -q -r requirements-load.txt
scripts/browser-deps.sh
# mariadb-server and redis-server, when missing: in CI a failure here fails the run.
if ! scripts/server-deps.sh && [ "${CI:-}" = "true" ]; then exit 1; fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# Types (pyproject's [tool.mypy], with django-stubs): once, on the pinned Django.
PYTHONPATH=. SCHEMALESS_TEST_DB=sqlite .venv/bin/mypy

mariadb_ok=yes
if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then
  if [ "${CI:-}" = "true" ]; then
    echo "test: mariadbd is not installed; CI must run the MariaDB suite" >&2
    exit 1
  fi
  mariadb_ok=no
  echo "test: WARNING mariadbd not found: the MariaDB half of the suite is SKIPPED on this machine"
fi

run_suite() {  # venv label backend [pytest args...]
  local venv=$1 label=$2 backend=$3
  shift 3
  echo
  echo "=== $label, $backend $* ==="
  local rc=0
  SCHEMALESS_TEST_DB=$backend "$venv/bin/python" -m pytest -p no:cacheprovider -q \
    --junitxml="$results/$label-$backend.xml" "$@" "${PYTEST_ARGS[@]}" || rc=$?
  if [ "$rc" = 5 ]; then
    echo "test: pytest ran no tests for $label/$backend" >&2
    exit 1
  fi
  return "$rc"
}

PYTEST_ARGS=("$@")
status=0

# The SQLite and the MariaDB pass of one Django version run side by side: each process has its
# own temporary SQLite files or its own throwaway servers (tests/settings.py), and the pair fits
# the CI time budget that one after the other did not. The SQLite pass's output follows the
# MariaDB pass's.
run_pair() {  # venv label [pytest args...]
  local venv=$1 label=$2
  shift 2
  local log="$results/$label-sqlite.log" pid pair_status=0
  run_suite "$venv" "$label" sqlite "$@" >"$log" 2>&1 &
  pid=$!
  if [ "$mariadb_ok" = yes ]; then run_suite "$venv" "$label" mariadb "$@" || pair_status=1; fi
  wait "$pid" || pair_status=1
  cat "$log"
  return "$pair_status"
}

matrix=no
if [ "${CI:-}" = "true" ] || [ "${SCHEMALESS_DJANGO_MATRIX:-}" = "all" ]; then matrix=yes; fi
if [ "$matrix" = yes ]; then
  py312=""
  if command -v pyenv >/dev/null; then
    py312=$(ls -d "$(pyenv root)"/versions/3.12.*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)
  fi
  if [ -z "$py312" ] && python3.12 -c 'pass' 2>/dev/null; then py312=$(command -v python3.12); fi
  if [ -z "$py312" ]; then
    echo "test: no Python 3.12 found for the Django 6.1 run" >&2
    exit 1
  fi
  # Installed while the 5.2 passes run.
  scripts/setup.sh .venv-django61 "$py312" "Django>=6.1,<6.2" >"$results/setup61.log" 2>&1 &
  setup61=$!
fi

run_pair .venv django52 || status=1
if [ "$mariadb_ok" = yes ]; then
  # Read replicas (tests/replicas/test_replicas.py) need a GTID replica of each shard server:
  # the group runs once, here, on servers of its own (in the passes above it skips, saying so).
  SCHEMALESS_TEST_REPLICAS=1 run_suite .venv django52-replicas mariadb tests/replicas/test_replicas.py \
    || status=1
fi

if [ "$matrix" = yes ]; then
  if ! wait "$setup61"; then
    cat "$results/setup61.log"
    echo "test: setting up the Django 6.1 environment failed" >&2
    exit 1
  fi
  # The slow groups (kills, lost connections, a server crash, races, the hypothesis query
  # properties: -m slow) test the store, not Django: they ran above, on 5.2, and run once.
  run_pair .venv-django61 django61 -m "not slow" || status=1
fi

.venv/bin/python - "$results" <<'PY'
import pathlib, sys, xml.etree.ElementTree as ET
tests = failures = errors = skipped = 0
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.xml")):
    for suite in ET.parse(path).getroot().iter("testsuite"):
        tests += int(suite.get("tests", 0)); failures += int(suite.get("failures", 0))
        errors += int(suite.get("errors", 0)); skipped += int(suite.get("skipped", 0))
        print(f"  {path.stem}: {suite.get('tests')} tests, {suite.get('failures')} failed, "
              f"{suite.get('errors')} errors, {suite.get('skipped')} skipped")
passed = tests - failures - errors - skipped
print(f"all runs: {passed} passed, {failures + errors} failed, {skipped} skipped")
PY
exit $status
