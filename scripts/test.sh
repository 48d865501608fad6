#!/usr/bin/env bash
# The whole test suite, from a fresh machine: lint and types, then the suite on SQLite and on two real
# MariaDB servers (started by the tests), with Django 5.2 LTS on this machine's python3.
# With CI=true (or SCHEMALESS_DJANGO_MATRIX=all) the suite also runs on Django 6.1 with
# Python 3.12 (pyenv's), without the slow groups (-m slow), which run once, on 5.2. The SQLite and
# MariaDB passes run side by side, the MariaDB pass in two lanes; with the matrix, each lane goes
# on to Django 6.1 as soon as its 5.2 pass ends. In CI a MariaDB that cannot start fails the run;
# elsewhere a machine without mariadbd skips that part and says so.
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
  SCHEMALESS_TEST_DB=$backend "$venv/bin/python" -m pytest -p no:cacheprovider -q --durations=20 \
    --junitxml="$results/$label-$backend.xml" "$@" "${PYTEST_ARGS[@]}" || rc=$?
  if [ "$rc" = 5 ]; then
    echo "test: pytest ran no tests for $label/$backend" >&2
    exit 1
  fi
  return "$rc"
}

PYTEST_ARGS=("$@")
status=0

# The MariaDB pass of one Django version runs as two lanes side by side, and the SQLite pass
# beside them: each process has its own temporary SQLite files or its own throwaway servers
# (tests/settings.py). The MariaDB tests mostly wait (servers starting, processes killed,
# fences, lock timeouts), so three processes on two cores finish in about the time of the
# longest lane; one after the other they did not fit the CI time budget. Lane a is the
# directories below; lane b is every other test directory, so a new directory is never left
# out. With pytest arguments given (a path, -k), the MariaDB pass is one lane.
LANE_A=(tests/reliability tests/replicas tests/serving tests/cache tests/backup tests/commands
  tests/admin tests/kinds tests/house tests/cleaner)
LANE_B_IGNORES=()
for dir in "${LANE_A[@]}"; do LANE_B_IGNORES+=("--ignore=$dir"); done

run_lanes() {  # venv label after_lane_a [pytest args...]  (after_lane_a: a function, or "")
  local venv=$1 label=$2 after_lane_a=$3
  shift 3
  local lanes_status=0 pids=() logs=()
  run_suite "$venv" "$label" sqlite "$@" >"$results/$label-sqlite.log" 2>&1 &
  pids+=($!) logs+=("$results/$label-sqlite.log")
  if [ "$mariadb_ok" = yes ]; then
    if [ "${#PYTEST_ARGS[@]}" -gt 0 ]; then
      run_suite "$venv" "$label" mariadb "$@" || lanes_status=1
    else
      {
        rc=0
        run_suite "$venv" "$label-a" mariadb "$@" "${LANE_A[@]}" || rc=1
        if [ -n "$after_lane_a" ]; then "$after_lane_a" || rc=1; fi
        exit "$rc"
      } >"$results/$label-mariadb-a.log" 2>&1 &
      pids+=($!) logs+=("$results/$label-mariadb-a.log")
      run_suite "$venv" "$label-b" mariadb "$@" tests "${LANE_B_IGNORES[@]}" || lanes_status=1
    fi
  fi
  for pid in "${pids[@]}"; do wait "$pid" || lanes_status=1; done
  for log in "${logs[@]}"; do cat "$log"; done
  return "$lanes_status"
}

# Read replicas (tests/replicas/test_replicas.py) need a GTID replica of each shard server: the
# group runs once, after lane a on 5.2, on servers of its own (in the other passes it skips,
# saying so).
replica_group() {
  SCHEMALESS_TEST_REPLICAS=1 run_suite .venv django52-replicas mariadb tests/replicas/test_replicas.py
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
  # Installed while the 5.2 passes run; its exit status lands in setup61.rc.
  { rc=0; scripts/setup.sh .venv-django61 "$py312" "Django>=6.1,<6.2" >"$results/setup61.log" 2>&1 || rc=$?
    echo "$rc" >"$results/setup61.rc"; } &
fi

await_setup61() {  # in any lane: wait for the Django 6.1 environment, fail if it failed
  while [ ! -s "$results/setup61.rc" ]; do sleep 1; done
  if [ "$(cat "$results/setup61.rc")" != 0 ]; then
    cat "$results/setup61.log"
    echo "test: setting up the Django 6.1 environment failed" >&2
    return 1
  fi
}

# The slow groups (kills, lost connections, a server crash, races, the hypothesis query
# properties: -m slow) test the store, not Django: they run on 5.2 only, once.
replicas=""
if [ "${#PYTEST_ARGS[@]}" -eq 0 ]; then replicas=replica_group; fi
if [ "$matrix" = yes ] && [ "$mariadb_ok" = yes ] && [ "${#PYTEST_ARGS[@]}" -eq 0 ]; then
  # Each lane goes on to its Django 6.1 pass as soon as its 5.2 pass ends, rather than all
  # three waiting for the slowest: three chains side by side (about two minutes less).
  chain() {  # label pytest-args...: the lane on 5.2, then (after lane a) the replicas, then 6.1
    local lane=$1 rc=0
    shift
    local backend=mariadb
    if [ "$lane" = sqlite ]; then backend=sqlite; fi
    local label52=django52 label61=django61
    if [ "$lane" != sqlite ]; then label52=django52-$lane label61=django61-$lane; fi
    run_suite .venv "$label52" "$backend" "$@" || rc=1
    if [ "$lane" = a ]; then replica_group || rc=1; fi
    await_setup61 || exit 1
    run_suite .venv-django61 "$label61" "$backend" -m "not slow" "$@" || rc=1
    exit "$rc"
  }
  chain sqlite >"$results/chain-sqlite.log" 2>&1 &
  pids=($!)
  chain a "${LANE_A[@]}" >"$results/chain-a.log" 2>&1 &
  pids+=($!)
  chain b tests "${LANE_B_IGNORES[@]}" >"$results/chain-b.log" 2>&1 &
  pids+=($!)
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  for lane in b a sqlite; do cat "$results/chain-$lane.log"; done
else
  run_lanes .venv django52 "$replicas" || status=1
  if [ "$matrix" = yes ]; then
    await_setup61 || exit 1
    run_lanes .venv-django61 django61 "" -m "not slow" || status=1
  fi
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
