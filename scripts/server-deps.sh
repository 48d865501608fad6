#!/usr/bin/env bash
# The servers the test tooling starts throwaway copies of (tests/settings.py): Debian's
# mariadb-server (mariadbd) and redis-server. Installed when missing, as root with apt-get;
# otherwise says what to install and fails.
set -euo pipefail
missing=()
if ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then missing+=(mariadb-server); fi
if ! command -v redis-server >/dev/null && [ ! -x /usr/bin/redis-server ]; then missing+=(redis-server); fi
if [ "${#missing[@]}" = 0 ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "server-deps: installing ${missing[*]} (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "server-deps: the MariaDB tests need ${missing[*]}: install the Debian package(s)" >&2
  exit 1
fi
