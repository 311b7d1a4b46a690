#!/usr/bin/env bash
# Headless Chromium (Debian's `chromium`) and playwright-core for the dashboard test
# (tests/services/daemon_dashboard.rs).
#
# Installs the package once with apt and writes
#   $SORTIE_TEST_SERVICES/chromium.env   SORTIE_TEST_CHROMIUM=/path/to/chromium
#                                        SORTIE_TEST_PLAYWRIGHT=tests/browser/dashboard.mjs
# Nothing keeps running: each test starts its own headless browser.
set -euo pipefail

: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"
log=$SORTIE_TEST_SERVICES/chromium-install.log

if ! command -v chromium >/dev/null; then
  echo "chromium.sh: installing chromium" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
  }
fi
bin=$(command -v chromium)
"$bin" --headless --no-sandbox --disable-gpu --version >/dev/null 2>&1 || {
  echo "chromium.sh: $bin does not start" >&2
  exit 1
}
echo "SORTIE_TEST_CHROMIUM=$bin" >"$SORTIE_TEST_SERVICES/chromium.env"
: >"$SORTIE_TEST_SERVICES/chromium.pid"

# playwright-core (pinned by tests/browser/package-lock.json) drives that browser.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "chromium.sh: installing nodejs and npm" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; } >>"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
  }
fi
browser_dir=$(cd "$(dirname "$0")/../../tests/browser" && pwd)
if [ ! -d "$browser_dir/node_modules/playwright-core" ]; then
  echo "chromium.sh: npm ci in $browser_dir" >&2
  (cd "$browser_dir" && npm ci --no-audit --no-fund) >>"$log" 2>&1 || {
    cat "$log" >&2
    exit 1
  }
fi
echo "SORTIE_TEST_PLAYWRIGHT=$browser_dir/dashboard.mjs" >>"$SORTIE_TEST_SERVICES/chromium.env"
