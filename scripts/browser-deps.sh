#!/usr/bin/env bash
# Debian's Chromium for the real-browser tests (Playwright drives it with executable_path;
# Playwright's own browser download does not work here and is never used).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "browser-deps: installing Debian's chromium (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "browser-deps: the browser tests need /usr/bin/chromium: install Debian's chromium package" >&2
  exit 1
fi
