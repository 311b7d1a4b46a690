#!/usr/bin/env bash
# Stoplight Prism serving GitHub's published OpenAPI description (trimmed to the issue
# endpoints), for the GitHub adapter's contract tests (tests/github_contract.rs).
#
# Installs the pinned prism-cli (scripts/services/prism/package-lock.json) once, starts
# `prism mock` on a free 127.0.0.1 port, waits until it answers, and writes
#   $SORTIE_TEST_SERVICES/prism.env   SORTIE_TEST_PRISM_GITHUB=http://127.0.0.1:PORT
#   $SORTIE_TEST_SERVICES/prism.pid   the pid to stop
# Its output goes to $SORTIE_TEST_SERVICES/prism.log.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"
prefix=scripts/services/prism
spec=tests/fixtures/github/github-issues.openapi.json
log=$SORTIE_TEST_SERVICES/prism.log

if ! command -v npm >/dev/null; then
  echo "prism.sh: installing nodejs and npm" >&2
  { apt-get update -qq && apt-get install -y -qq nodejs npm; } >"$SORTIE_TEST_SERVICES/prism-install.log" 2>&1 || {
    cat "$SORTIE_TEST_SERVICES/prism-install.log" >&2
    exit 1
  }
fi

# Install only when the lock file changed since the last install (npm ci wipes and
# reinstalls every time, which costs ~10 s).
stamp=$prefix/node_modules/.sortie-lock-sha256
want=$(sha256sum "$prefix/package-lock.json" | cut -d' ' -f1)
if [[ ! -x $prefix/node_modules/.bin/prism || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  npm ci --prefix "$prefix" --no-audit --no-fund --loglevel=error >"$SORTIE_TEST_SERVICES/prism-install.log" 2>&1 || {
    cat "$SORTIE_TEST_SERVICES/prism-install.log" >&2
    exit 1
  }
  echo "$want" >"$stamp"
fi

# A free port: bind port 0 and read what the kernel picked.
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')

"$prefix/node_modules/.bin/prism" mock -h 127.0.0.1 -p "$port" "$spec" >"$log" 2>&1 &
pid=$!
echo "$pid" >"$SORTIE_TEST_SERVICES/prism.pid"

url=http://127.0.0.1:$port
for _ in $(seq 1 200); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "prism.sh: prism exited before answering; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  # Prism listens only once the description is loaded: an open port means ready.
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "SORTIE_TEST_PRISM_GITHUB=$url" >"$SORTIE_TEST_SERVICES/prism.env"
    exit 0
  fi
  sleep 0.1
done
echo "prism.sh: prism did not answer on $url within 20 s; its log:" >&2
cat "$log" >&2
kill "$pid" 2>/dev/null || true
exit 1
