#!/usr/bin/env bash
# Stoplight Prism serving the trackers' published API descriptions (trimmed to the issue
# and pull-request endpoints), for the adapters' contract tests (tests/services/github_contract.rs,
# tests/services/forge_contract.rs, tests/services/pulls_contract.rs): one `prism mock` per description.
#
# Installs the pinned prism-cli (scripts/services/prism/package-lock.json) once, starts
# one `prism mock` per spec below on a free 127.0.0.1 port, waits until each answers,
# and writes
#   $SORTIE_TEST_SERVICES/prism.env   SORTIE_TEST_PRISM_<NAME>=http://127.0.0.1:PORT, one per spec
#   $SORTIE_TEST_SERVICES/prism.pid   the pids to stop, one per line
# Their output goes to $SORTIE_TEST_SERVICES/prism-<name>.log.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${SORTIE_TEST_SERVICES:?set SORTIE_TEST_SERVICES to a directory (scripts/test does)}"
mkdir -p "$SORTIE_TEST_SERVICES"
prefix=scripts/services/prism
# NAME (the variable's suffix) and description, one per line.
specs="GITHUB tests/fixtures/github/github-issues.openapi.json
GITHUB_PULLS tests/fixtures/github/github-pulls.openapi.json
GITEA tests/fixtures/gitea/gitea-issues.swagger.json
GITEA_PULLS tests/fixtures/gitea/gitea-pulls.swagger.json
GITLAB tests/fixtures/gitlab/gitlab-issues.openapi.json
GITLAB_MRS tests/fixtures/gitlab/gitlab-mergerequests.openapi.json"

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

env_file=$SORTIE_TEST_SERVICES/prism.env
pid_file=$SORTIE_TEST_SERVICES/prism.pid
: >"$env_file"
: >"$pid_file"

# Start one prism per description; a free port: bind port 0 and read what the kernel picked.
declare -A ports pids
while read -r name spec; do
  port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  log=$SORTIE_TEST_SERVICES/prism-${name,,}.log
  "$prefix/node_modules/.bin/prism" mock -h 127.0.0.1 -p "$port" "$spec" >"$log" 2>&1 &
  pids[$name]=$!
  ports[$name]=$port
  echo "$!" >>"$pid_file"
done <<<"$specs"

for name in "${!ports[@]}"; do
  port=${ports[$name]}
  pid=${pids[$name]}
  log=$SORTIE_TEST_SERVICES/prism-${name,,}.log
  url=http://127.0.0.1:$port
  ready=
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "prism.sh: prism for $name exited before answering; its log:" >&2
      cat "$log" >&2
      exit 1
    fi
    # Prism listens only once the description is loaded: an open port means ready.
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      ready=1
      break
    fi
    sleep 0.1
  done
  if [[ -z $ready ]]; then
    echo "prism.sh: prism for $name did not answer on $url within 30 s; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  echo "SORTIE_TEST_PRISM_$name=$url" >>"$env_file"
done
