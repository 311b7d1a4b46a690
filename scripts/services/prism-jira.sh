#!/usr/bin/env bash
# A second Stoplight Prism instance, serving Atlassian's published Jira Cloud REST v3
# description (trimmed to what sortie uses), for the Jira adapter's contract tests
# (tests/services/jira_contract.rs). Same pinned prism-cli as prism.sh
# (scripts/services/prism/package-lock.json), installed once for both.
#
# Writes
#   $SORTIE_TEST_SERVICES/prism-jira.env   SORTIE_TEST_PRISM_JIRA=http://127.0.0.1:PORT
#   $SORTIE_TEST_SERVICES/prism-jira.pid   the pid to stop
# Its output goes to $SORTIE_TEST_SERVICES/prism-jira.log.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"
prefix=scripts/services/prism
spec=tests/fixtures/jira/jira-issues.openapi.json
log=$SORTIE_TEST_SERVICES/prism-jira.log

if ! command -v npm >/dev/null; then
  echo "prism-jira.sh: installing nodejs and npm" >&2
  { apt-get update -qq && apt-get install -y -qq nodejs npm; } >"$SORTIE_TEST_SERVICES/prism-jira-install.log" 2>&1 || {
    cat "$SORTIE_TEST_SERVICES/prism-jira-install.log" >&2
    exit 1
  }
fi

# The same install-if-the-lock-changed step as prism.sh (whichever runs first installs).
stamp=$prefix/node_modules/.sortie-lock-sha256
want=$(sha256sum "$prefix/package-lock.json" | cut -d' ' -f1)
if [[ ! -x $prefix/node_modules/.bin/prism || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  npm ci --prefix "$prefix" --no-audit --no-fund --loglevel=error >"$SORTIE_TEST_SERVICES/prism-jira-install.log" 2>&1 || {
    cat "$SORTIE_TEST_SERVICES/prism-jira-install.log" >&2
    exit 1
  }
  echo "$want" >"$stamp"
fi

port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')

"$prefix/node_modules/.bin/prism" mock -h 127.0.0.1 -p "$port" "$spec" >"$log" 2>&1 &
pid=$!
echo "$pid" >"$SORTIE_TEST_SERVICES/prism-jira.pid"

url=http://127.0.0.1:$port
for _ in $(seq 1 300); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "prism-jira.sh: prism exited before answering; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "SORTIE_TEST_PRISM_JIRA=$url" >"$SORTIE_TEST_SERVICES/prism-jira.env"
    exit 0
  fi
  sleep 0.1
done
echo "prism-jira.sh: prism did not answer on $url within 30 s; its log:" >&2
cat "$log" >&2
kill "$pid" 2>/dev/null || true
exit 1
